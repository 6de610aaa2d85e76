"""The bot's words about its model: the window it uses, and failures waiting will not fix,
in Russian and English; `src/services/texts.py` merges them into its TEXTS."""

from __future__ import annotations

MODEL_TEXTS: dict[str, dict[str, str]] = {
    "ru": {
        "chat_model_line": "Модель {model} на {url}, окно контекста {window} токенов ({source}).",
        "chat_window": "Окно контекста {window} токенов ({source}).",
        "window_source_props": "сказал сервер llama.cpp, /props",
        "window_source_models": "сказал сервер vLLM, /v1/models",
        "window_source_ollama": "сказала Ollama, /api/show и /api/ps",
        "window_source_lmstudio": "сказал LM Studio, /api/v0/models",
        "window_source_error": "узнал из ответа сервера на слишком длинный запрос",
        "window_source_setting": "задано в MODEL_CONTEXT_LIMITS или MODEL_CHOICES",
        "window_source_default": "сервер не сказал: DEFAULT_CONTEXT_LIMIT, пока сервер "
        "не откажет в слишком длинном запросе",
        "window_too_small": "Окно контекста модели — {window} токенов, а мои инструкции "
        "с вашим сообщением занимают около {need}. Ожидание тут не поможет. Ваше сообщение "
        "сохранено. Как исправить (тому, кто запускает бота): запустить сервер модели с "
        "окном побольше (llama.cpp: `llama-server -c 8192`; llama-cpp-python: "
        "`--n_ctx 8192`; Ollama: `OLLAMA_CONTEXT_LENGTH=8192`; vLLM: `--max-model-len`; "
        "LM Studio: длина контекста при загрузке модели) или выбрать другую модель. "
        "Если сообщение очень длинное — сократите его.",
        "model_not_found": "Сервер моделей не знает модель {model}, поэтому ожидание не "
        "поможет. Ваше сообщение сохранено. Как исправить (тому, кто запускает бота): "
        "указать в LLM_MODEL модель, которую сервер отдаёт (список — GET /v1/models).",
        "model_auth_refused": "Сервер моделей отказал в доступе (HTTP {status}), поэтому "
        "ожидание не поможет. Ваше сообщение сохранено. Как исправить (тому, кто запускает "
        "бота): проверить OPENAI_API_KEY и OPENAI_BASE_URL.",
    },
    "en": {
        "chat_model_line": "Model {model} at {url}, context window {window} tokens ({source}).",
        "chat_window": "Context window {window} tokens ({source}).",
        "window_source_props": "said by the llama.cpp server, /props",
        "window_source_models": "said by the vLLM server, /v1/models",
        "window_source_ollama": "said by Ollama, /api/show and /api/ps",
        "window_source_lmstudio": "said by LM Studio, /api/v0/models",
        "window_source_error": "learned from the server refusing a request as too long",
        "window_source_setting": "set in MODEL_CONTEXT_LIMITS or MODEL_CHOICES",
        "window_source_default": "the server did not say: DEFAULT_CONTEXT_LIMIT until it "
        "refuses a request as too long",
        "window_too_small": "The model's context window is {window} tokens, and my "
        "instructions with your message take about {need}. Waiting won't help. Your "
        "message is saved. The fix (for whoever runs the bot): start the model server with "
        "a larger window (llama.cpp: `llama-server -c 8192`; llama-cpp-python: "
        "`--n_ctx 8192`; Ollama: `OLLAMA_CONTEXT_LENGTH=8192`; vLLM: `--max-model-len`; "
        "LM Studio: the context length when loading the model) or choose another model. "
        "If your message is very long, shorten it.",
        "model_not_found": "The model server does not know the model {model}, so waiting "
        "won't help. Your message is saved. The fix (for whoever runs the bot): set "
        "LLM_MODEL to a model the server serves (GET /v1/models lists them).",
        "model_auth_refused": "The model server refused access (HTTP {status}), so waiting "
        "won't help. Your message is saved. The fix (for whoever runs the bot): check "
        "OPENAI_API_KEY and OPENAI_BASE_URL.",
    },
}
