"""What users give mmpool: located YAML, mmpool configs, SGLang --config files, launch commands."""
