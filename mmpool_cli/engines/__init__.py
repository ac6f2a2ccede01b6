"""The engines mmpool plans for, one package each."""
