"""SGLang's own rules: the pool arithmetic, its flags and --config merge, the launch environment."""
