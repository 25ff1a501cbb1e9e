"""The model gateway and everything a model call passes through: provider settings per role
(`settings`), the gateway itself (`gateway`: retries, timeouts, rate limits, structured output,
the response cache, the ledger), the offline `scripted` provider and the real local model
(`scripted`, `local_model`), embeddings, the OpenAI-compatible endpoint that serves the gateway
(`openai_api`), and the probes of what an endpoint can do (`model_probe`)."""
