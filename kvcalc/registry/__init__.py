"""The registry: YAML files under model_configs/ (and Hugging Face config.json files), validated
by pydantic into the engine's spec types."""
