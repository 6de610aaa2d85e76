"""The bot's own words, in Russian and English, chosen by the user's language code."""

from __future__ import annotations

from src.graph.lang import lang_of
from src.services.texts_export import EXPORT_TEXTS
from src.services.texts_members import MEMBER_TEXTS
from src.services.texts_models import MODEL_TEXTS
from src.services.texts_tasks import TASK_TEXTS
from src.services.texts_tools import TOOL_TEXTS

TEXTS: dict[str, dict[str, str]] = {
    "ru": {
        "greeting": (
            "Привет, {name}! Я ассистент с памятью: помню наш разговор, важные факты о вас "
            "и прошлые беседы. Просто напишите сообщение. /help — список команд."
        ),
        "help": (
            "Я отвечаю на сообщения и помню контекст. Понимаю голосовые, фото "
            "и документы (PDF, Word, Excel, PowerPoint, любые текстовые файлы).\n"
            "/new — начать новый разговор (текущий будет стёрт)\n"
            "/forget — начать с чистого листа, сохранив историю\n"
            "/mute — включить или выключить напоминания и задачи\n"
            "/tasks — запланированные задачи; /tz — часовой пояс\n"
            "/memory — что я о вас помню; /memory forget КЛЮЧ — забыть один факт; "
            "/memory clear — забыть факты и прошлые беседы\n"
            "/compress — сжать старую часть разговора\n"
            "/stop — остановить ответ, который я сейчас пишу\n"
            "/model — выбрать модель, которая отвечает\n"
            "/usage — сколько токенов я потратил на вас; /usage all — все (администраторам)\n"
            "/tools — внешние инструменты, которые вам доступны\n"
            "/export — прислать файлом всё, что я о вас храню\n"
            "/erase — стереть всё, что я о вас храню (спрошу подтверждение)\n"
            "/help — эта справка\n"
            "В группе /new, /forget и /compress — только для её администраторов; "
            "/memory clear участника забывает только его собственные факты."
        ),
        "help_terminal": (
            "Я отвечаю на сообщения и помню контекст.\n"
            "/new — начать новый разговор (текущий будет стёрт)\n"
            "/forget — начать с чистого листа, сохранив историю\n"
            "/memory — что я о вас помню; /memory forget КЛЮЧ — забыть один факт; "
            "/memory clear — забыть факты и прошлые беседы\n"
            "/tools — инструменты, которыми я могу пользоваться для вас\n"
            "/export — записать в файлы всё, что я о вас храню\n"
            "/erase — стереть всё, что я о вас храню (спрошу подтверждение)\n"
            "/help — эта справка; /exit — выйти (или Ctrl+D)\n"
            "Ctrl+C — остановить ответ (написанное сохранится); ещё раз — выйти\n"
            "Задачи, напоминания и голосовые — в Telegram-боте."
        ),
        "new": "Начали новый разговор. Предыдущий стёрт.",
        "new_topic": "Новая тема «{name}»: здесь свой разговор, другие темы не тронуты.",
        "new_topic_failed": "Тему создать не получилось: в этом чате темы выключены.",
        "forget": "Готово: начинаем с чистого листа. История сохранена, напоминания выключены.",
        "muted": "Напоминания выключены: сам я писать не буду. /mute — включить снова.",
        "unmuted": "Напоминания включены: если вы надолго пропадёте, я напомню о себе. "
        "/mute — выключить.",
        "mute_group": "В группах я не напоминаю о себе, так что выключать нечего: "
        "напоминания приходят только в личный чат.",
        "unknown_command": "Не знаю такой команды. /help — список команд.",
        "model_error": "Не получилось получить ответ от модели. Ваше сообщение сохранено — "
        "попробуйте ещё раз чуть позже.",
        "model_answered_nothing": "Модель ответила пустым сообщением. Ваше сообщение сохранено — "
        "попробуйте переформулировать.",
        "store_error": "Не удалось сохранить сообщение — база данных недоступна. "
        "Пожалуйста, отправьте его ещё раз через минуту.",
        "internal_error": "Что-то пошло не так. Попробуйте ещё раз.",
        "reply_failed": "Ваше сообщение сохранено, но ответ не удалось записать: база данных "
        "недоступна. Повторите вопрос через минуту.",
        "empty_message": "Сообщение пустое — напишите что-нибудь.",
        "too_long": "Сообщение слишком длинное ({size} символов, максимум {limit}). "
        "Сократите его или разбейте на части.",
        "not_text": "Я понимаю текст, голосовые, фото и документы (PDF, Word, Excel, "
        "PowerPoint, текстовые файлы). "
        "Такое сообщение я прочитать не могу — опишите словами, что нужно.",
        "heard": "🎤 «{text}»",
        "voice_off": "Голосовые здесь не распознаются — напишите, пожалуйста, текстом.",
        "voice_failed": "Не получилось распознать голосовое. Попробуйте ещё раз "
        "или напишите текстом.",
        "voice_silent": "В голосовом не слышно слов — запишите ещё раз или напишите текстом.",
        "voice_too_long": "Голосовое слишком длинное ({minutes} мин., максимум {limit} мин.). "
        "Разбейте его на части или напишите текстом.",
        "photo_unseen": "Картинки я не вижу. Напишите в подписи или сообщением, что на ней "
        "и что нужно сделать.",
        "photo_broken": "Не получилось открыть фото — пришлите его ещё раз.",
        "photo_refused": "Эта модель не принимает изображения, так что фото я не вижу; "
        "отвечаю по подписи.",
        "file_too_big": "Файл «{name}» слишком большой ({size} МБ, максимум {limit} МБ).",
        "document_unsupported": "Файлы такого типа («{name}») я не читаю: только текстовые "
        "файлы, PDF, Word, Excel, PowerPoint (DOCX, XLSX, PPTX) и картинки.",
        "document_broken": "Не получилось прочитать «{name}»: файл повреждён.",
        "download_failed": "Не получилось скачать «{name}» из Telegram — пришлите ещё раз.",
        "document_encrypted": "«{name}» защищён паролем — пришлите версию без пароля.",
        "document_empty": "В «{name}» нет текста, который можно извлечь (скан или картинки?).",
        "document_too_big": "«{name}» слишком велик после распаковки — я его не открываю.",
        "document_too_heavy": "Я перестал читать «{name}»: на него уходит слишком много "
        "времени или памяти — пришлите файл попроще (например, только нужные страницы).",
        "document_pages": "«{name}» ({pages} стр., ~{words} слов)",
        "document_words": "«{name}» (~{words} слов)",
        "documents_read": "📄 Прочитал {files}. Спрашивайте, что нужно с ним сделать.",
        "not_allowed": "Извините, этот бот доступен только ограниченному кругу пользователей.",
        "rate_limited": "Слишком много сообщений подряд. Подождите минуту и продолжите.",
        "waited_too_long": (
            "Это сообщение ждало ответа {minutes} мин. — слишком долго, чтобы отвечать на него"
            " сейчас. Я сохранил его в истории; если вопрос ещё актуален, напишите его снова."
        ),
        "group_admins_only": "В группе эту команду может выполнить только администратор группы.",
        "reminder": "Давно не общались! Если захотите продолжить — просто напишите.",
        # --- Telegram bot (src/bot) ---
        "cmd_start": "приветствие",
        "cmd_help": "что я умею и все команды",
        "cmd_new": "начать новый разговор (текущий будет стёрт)",
        "cmd_forget": "начать с чистого листа, сохранив историю",
        "cmd_mute": "включить или выключить напоминания",
        "cmd_memory": "что я помню; /memory forget КЛЮЧ, /memory clear — забыть",
        "cmd_compress": "сжать старую часть разговора",
        "cmd_stop": "остановить ответ, который я пишу",
        "cmd_model": "выбрать модель, которая отвечает",
        "model_list": "Сейчас отвечает {model}. Выберите модель:",
        "model_set": "Готово: дальше отвечает {model}.",
        "model_unknown": "Такой модели здесь нет. Доступны: {choices}.",
        "model_only": "Здесь доступна только одна модель: {model}.",
        "stop_button": "⏹ Стоп",
        "stopped": "Остановлено.",
        "nothing_to_stop": "Сейчас я ничего не пишу: останавливать нечего.",
        "stop_not_yours": (
            "Остановить ответ может тот, кто задал вопрос, или администратор группы."
        ),
        "status_search": "🔎 ищу в истории…",
        "status_memory": "🧠 вспоминаю прошлые разговоры…",
        "status_thread": "🗂 перебираю разговор…",
        "status_tool": "⚙️ работаю…",
        "memory_title": "Что я помню:",
        "memory_window": "Сообщений в рабочей памяти: {shown} из {window} (всего в разговоре: "
        "{stored}).",
        "memory_summary": "Краткое содержание разговора:\n{summary}",
        "memory_no_summary": "Краткого содержания разговора пока нет.",
        "memory_facts": "Факты ({count}):",
        "memory_no_facts": "Фактов пока нет.",
        "memory_compacts": "Прошлые беседы ({count}):",
        "memory_no_compacts": "Прошлых бесед пока нет.",
        "memory_reminders_on": "Напоминания включены (/mute — выключить).",
        "memory_reminders_off": "Напоминания выключены (/mute — включить).",
        "memory_hint": "🗑 N — забыть пункт N; /memory forget КЛЮЧ — забыть факт; "
        "/memory clear — забыть все факты и прошлые беседы.",
        "memory_was": " — раньше: {value}, до {date}",
        "memory_page": "Что я помню, страница {page} из {pages}:",
        "memory_pages": "Страница {page} из {pages}.",
        "memory_forgot": "Забыл факт «{name}» и его прежние значения.",
        "memory_no_such_fact": "Факта «{name}» я не помню. Ключи фактов — в /memory.",
        "memory_forget_usage": "Какой факт забыть? /memory forget КЛЮЧ (ключи — в /memory).",
        "memory_compact_forgot": "Забыл эту беседу.",
        "memory_gone": "Этого я уже не помню.",
        "fact_type_preference": "предпочтение",
        "fact_type_hypothesis": "предположение",
        "fact_type_constraint": "ограничение",
        "memory_cleared": "Забыл факты о вас и прошлые беседы ({facts} фактов, {compacts} бесед).",
        "chat_no_model": (
            "Модель не настроена, и локальный сервер моделей не ответил ({where}).\n"
            "Три способа подключить модель:\n"
            "  1. OpenAI или другой OpenAI-совместимый API: задайте OPENAI_API_KEY=... "
            "(для OpenRouter, vLLM и других ещё OPENAI_BASE_URL) и при желании LLM_MODEL.\n"
            "  2. Ollama на этом компьютере: установите её (https://ollama.com) и выполните "
            "`ollama pull qwen2.5:7b`; tgagent chat найдёт её сам.\n"
            "  3. Сервер llama.cpp на этом компьютере: `llama-server -m модель.gguf --port "
            "8080`; tgagent chat найдёт его сам.\n"
            "Переменные задаются в окружении или в файле .env в текущем каталоге "
            "(см. .env.example)."
        ),
        "chat_local_model": (
            "OPENAI_API_KEY и OPENAI_BASE_URL не заданы: использую модель {model} на {name} "
            "({url}). Другую модель выбирают через OPENAI_BASE_URL и LLM_MODEL."
        ),
        "compress_report": "Готово: сжал старую часть разговора. В контексте стало меньше "
        "сообщений на {messages} и токенов примерно на {tokens} (было ~{before}, "
        "стало ~{after}).",
        "compress_nothing": "Сжимать пока нечего: разговор ещё короткий.",
        "compress_declined": "Оставил как есть: в старой части разговора нечего сократить "
        "без потери важного.",
        "compress_failed": "Не получилось сжать разговор. Ничего не потеряно — "
        "попробуйте чуть позже.",
        "over_budget": "Лимит расходов исчерпан, поэтому я не отвечаю. Сообщение сохранено; "
        "лимит обновится {when}.",
        "budget_ran_out": "Лимит расходов закончился, пока я работал над ответом, и я "
        "остановился, не закончив. Сообщение сохранено; лимит обновится {when}.",
        "budget_warning_chat": "Израсходовано {percent}% {budget}. Лимит обновится {when}.",
        "budget_warning_sender": "Израсходовано {percent}% вашего личного {budget} "
        "(ответы в группах тоже считаются). Лимит обновится {when}.",
        "budget_day_tokens": "дневного лимита токенов",
        "budget_month_tokens": "месячного лимита токенов",
        "budget_day_usd": "дневного лимита в долларах",
        "budget_month_usd": "месячного лимита в долларах",
        "usage_title": "Токены (вход, из них из кэша, выход) и примерная стоимость:",
        "usage_line": "{label}: {tokens} (вход {input}, кэш {cached}, выход {output}){cost}",
        "usage_nothing": "{label}: ничего",
        "usage_last_turn": "Последний ответ",
        "usage_today": "Сегодня",
        "usage_month": "Этот месяц",
        "usage_no_price": " (цена модели не задана)",
        "usage_limits": "Лимиты: {day} в день, {month} в месяц.",
        "usage_limits_usd": "Лимиты в долларах: {day} в день, {month} в месяц.",
        "usage_unlimited": "без лимита",
        "usage_top_today": "Больше всех токенов сегодня:",
        "usage_top_month": "Больше всех токенов в этом месяце:",
        "usage_top_none": "никто",
        "usage_admins_only": "/usage all — только для администраторов бота.",
        "cmd_usage": "сколько токенов потрачено и во что это обошлось",
        # /erase and /export (issue 31)
        "cmd_erase": "стереть всё, что я о вас храню",
        "cmd_export": "прислать файлом всё, что я о вас храню",
        "erase_confirm": (
            "Стереть всё, что я храню о вас в этом чате: все сообщения, сводки, факты "
            "и их историю, прошлые беседы, записи запусков и настройки? Вернуть будет "
            "нельзя. Нажмите кнопку или отправьте /erase yes."
        ),
        "erase_confirm_terminal": (
            "Стереть всё, что я храню о вас: все сообщения, сводки, факты и их историю, "
            "прошлые беседы, записи запусков и настройки? Вернуть будет нельзя. "
            "Отправьте /erase yes, чтобы стереть."
        ),
        "erase_button": "Стереть всё",
        "erased": "Готово: я стёр всё, что хранил о вас (сообщений: {messages}, фактов: "
        "{facts}, прошлых бесед: {compacts}), и начну с чистого листа.",
        "erase_failed": "Не получилось стереть данные. Попробуйте ещё раз чуть позже.",
        "export_caption": "Всё, что я храню о вас: {name}",
        "export_written": "Всё, что я храню о вас, записано в файлы:\n{paths}",
        "export_failed": "Не получилось собрать выгрузку. Попробуйте ещё раз чуть позже.",
    },
    "en": {
        "greeting": (
            "Hi, {name}! I'm an assistant with memory: I remember our conversation, important "
            "facts about you and our previous chats. Just send a message. /help lists commands."
        ),
        "help": (
            "I answer messages and remember context. I understand voice notes, photos "
            "and documents (PDF, Word, Excel, PowerPoint, any text file).\n"
            "/new — start a new conversation (the current one is erased)\n"
            "/forget — start from a clean slate, keeping the history\n"
            "/mute — turn reminders and tasks off or on\n"
            "/tasks — scheduled tasks; /tz — your time zone\n"
            "/memory — what I remember about you; /memory forget KEY — forget one fact; "
            "/memory clear — forget facts and past chats\n"
            "/compress — compress the older part of the conversation\n"
            "/stop — stop the answer I am writing now\n"
            "/model — pick the model that answers\n"
            "/usage — the tokens I spent on you; /usage all — everyone's (for admins)\n"
            "/tools — the outside tools you may use\n"
            "/export — send you a file of everything I keep about you\n"
            "/erase — erase everything I keep about you (I ask first)\n"
            "/help — this help\n"
            "In a group, /new, /forget and /compress are for its administrators; "
            "a member's /memory clear forgets only their own facts."
        ),
        "help_terminal": (
            "I answer messages and remember context.\n"
            "/new — start a new conversation (the current one is erased)\n"
            "/forget — start from a clean slate, keeping the history\n"
            "/memory — what I remember about you; /memory forget KEY — forget one fact; "
            "/memory clear — forget facts and past chats\n"
            "/tools — the tools I may use for you\n"
            "/export — write everything I keep about you into files\n"
            "/erase — erase everything I keep about you (I ask first)\n"
            "/help — this help; /exit — quit (or Ctrl+D)\n"
            "Ctrl+C — stop the reply (what it wrote is kept); again — quit\n"
            "Tasks, reminders and voice notes are the Telegram bot's."
        ),
        "new": "Started a new conversation. The previous one is erased.",
        "new_topic": "New topic “{name}”: a conversation of its own; other topics are untouched.",
        "new_topic_failed": "Could not create the topic: topics are off in this chat.",
        "forget": "Done: a clean slate. Your history is kept, reminders are off.",
        "muted": "Reminders are off: I won't write first. /mute turns them back on.",
        "unmuted": "Reminders are on: if you go quiet for a while, I'll remind you of myself. "
        "/mute turns them off.",
        "mute_group": "I never remind groups of myself, so there is nothing to turn off: "
        "reminders only come to private chats.",
        "unknown_command": "I don't know that command. /help lists commands.",
        "model_error": "I couldn't get an answer from the model. Your message is saved — "
        "please try again a bit later.",
        "model_answered_nothing": "The model answered with an empty message. Your message is "
        "saved — try putting it another way.",
        "store_error": "I couldn't save your message — the database is unavailable. "
        "Please send it again in a minute.",
        "internal_error": "Something went wrong. Please try again.",
        "reply_failed": "Your message is saved, but I couldn't record the answer: the database "
        "is unavailable. Please ask again in a minute.",
        "empty_message": "The message is empty — please write something.",
        "too_long": "The message is too long ({size} characters, at most {limit}). "
        "Please shorten it or split it.",
        "not_text": "I understand text, voice notes, photos and documents (PDF, Word, Excel, "
        "PowerPoint, text files). I can't read this kind of message: please describe what "
        "you need in words.",
        "heard": "🎤 “{text}”",
        "voice_off": "Voice notes aren't transcribed here: please write your message.",
        "voice_failed": "I couldn't transcribe the voice note. Please try again or write it.",
        "voice_silent": "I couldn't hear any words in the voice note: please record it again "
        "or write it.",
        "voice_too_long": "The voice note is too long ({minutes} min, at most {limit} min). "
        "Please split it or write it.",
        "photo_unseen": "I can't see pictures. Tell me in a caption or a message what is on it "
        "and what you need.",
        "photo_broken": "I couldn't open the photo: please send it again.",
        "photo_refused": "This model takes no images, so I can't see the photo; "
        "I'm answering from the caption.",
        "file_too_big": "“{name}” is too big ({size} MB, at most {limit} MB).",
        "document_unsupported": "I can't read files like “{name}”: only text files, PDF, Word, "
        "Excel, PowerPoint (DOCX, XLSX, PPTX) and images.",
        "document_broken": "I couldn't read “{name}”: the file is damaged.",
        "download_failed": "I couldn't download “{name}” from Telegram: please send it again.",
        "document_encrypted": "“{name}” is password-protected: please send it without a password.",
        "document_empty": "“{name}” has no text I can extract (a scan, or only pictures?).",
        "document_too_big": "“{name}” unpacks to too much data: I won't open it.",
        "document_too_heavy": "I stopped reading “{name}”: it takes too much time or memory "
        "to read; please send a simpler file (only the pages you need, say).",
        "document_pages": "“{name}” ({pages} pages, ~{words} words)",
        "document_words": "“{name}” (~{words} words)",
        "documents_read": "📄 I've read {files}. Ask me what to do with it.",
        "not_allowed": "Sorry, this bot is available only to a limited set of users.",
        "rate_limited": "Too many messages in a row. Please wait a minute.",
        "waited_too_long": (
            "This message waited {minutes} min for an answer, too long to answer it now."
            " I kept it in the history; if it still matters, send it again."
        ),
        "group_admins_only": "In a group, only the group's administrators can use this command.",
        "reminder": "It's been a while! Just write if you'd like to continue.",
        # --- Telegram bot (src/bot) ---
        "cmd_start": "greeting",
        "cmd_help": "what I do and every command",
        "cmd_new": "start a new conversation (the current one is erased)",
        "cmd_forget": "start from a clean slate, keeping the history",
        "cmd_mute": "turn reminders off or on",
        "cmd_memory": "what I remember; /memory forget KEY, /memory clear forget",
        "cmd_compress": "compress the older part of the conversation",
        "cmd_stop": "stop the answer I am writing",
        "cmd_model": "pick the model that answers",
        "model_list": "{model} answers now. Pick a model:",
        "model_set": "Done: {model} answers from now on.",
        "model_unknown": "There is no such model here. Available: {choices}.",
        "model_only": "Only one model is available here: {model}.",
        "stop_button": "⏹ Stop",
        "stopped": "Stopped.",
        "nothing_to_stop": "I am not writing anything right now: there is nothing to stop.",
        "stop_not_yours": "Only the one who asked, or a group administrator, can stop this answer.",
        "status_search": "🔎 searching the history…",
        "status_memory": "🧠 recalling earlier conversations…",
        "status_thread": "🗂 going through the conversation…",
        "status_tool": "⚙️ working…",
        "memory_title": "What I remember:",
        "memory_window": "Messages in working memory: {shown} of {window} (stored in this "
        "conversation: {stored}).",
        "memory_summary": "Summary of the conversation:\n{summary}",
        "memory_no_summary": "No summary of the conversation yet.",
        "memory_facts": "Facts ({count}):",
        "memory_no_facts": "No facts yet.",
        "memory_compacts": "Previous conversations ({count}):",
        "memory_no_compacts": "No previous conversations yet.",
        "memory_reminders_on": "Reminders are on (/mute turns them off).",
        "memory_reminders_off": "Reminders are off (/mute turns them on).",
        "memory_hint": "🗑 N forgets item N; /memory forget KEY forgets a fact; "
        "/memory clear forgets all facts and previous conversations.",
        "memory_was": " — was {value} until {date}",
        "memory_page": "What I remember, page {page} of {pages}:",
        "memory_pages": "Page {page} of {pages}.",
        "memory_forgot": "Forgot the fact {name} and its earlier values.",
        "memory_no_such_fact": "I remember no fact called {name}. /memory lists the keys.",
        "memory_forget_usage": "Which fact? /memory forget KEY (/memory lists the keys).",
        "memory_compact_forgot": "Forgot that conversation.",
        "memory_gone": "I no longer remember that.",
        "fact_type_preference": "preference",
        "fact_type_hypothesis": "hypothesis",
        "fact_type_constraint": "constraint",
        "memory_cleared": "Forgot facts about you and past chats "
        "({facts} facts, {compacts} chats).",
        "chat_no_model": (
            "No model is configured, and no local model server answered ({where}).\n"
            "Three ways to get one:\n"
            "  1. OpenAI or another OpenAI-compatible API: set OPENAI_API_KEY=... (plus "
            "OPENAI_BASE_URL for OpenRouter, vLLM and others) and optionally LLM_MODEL.\n"
            "  2. Ollama on this machine: install it (https://ollama.com) and run "
            "`ollama pull qwen2.5:7b`; tgagent chat finds it by itself.\n"
            "  3. A llama.cpp server on this machine: `llama-server -m model.gguf --port 8080`; "
            "tgagent chat finds it by itself.\n"
            "Set the variables in the environment or in a .env file in this directory "
            "(see .env.example)."
        ),
        "chat_local_model": (
            "No OPENAI_API_KEY or OPENAI_BASE_URL set: using model {model} on {name} ({url}). "
            "Set OPENAI_BASE_URL and LLM_MODEL to choose another."
        ),
        "compress_report": "Done: compressed the older part of our conversation. The context "
        "is {messages} messages and about {tokens} tokens shorter (~{before} -> ~{after}).",
        "compress_nothing": "Nothing to compress yet: the conversation is still short.",
        "compress_declined": "Left it as is: nothing in the older part can be shortened "
        "without losing something important.",
        "compress_failed": "Couldn't compress the conversation. Nothing was lost — "
        "please try again a bit later.",
        "over_budget": "You have used up your budget, so I am not answering. Your "
        "message is saved; the budget resets at {when}.",
        "budget_ran_out": "Your budget ran out while I was working on this, so I stopped "
        "before finishing. Your message is saved; the budget resets at {when}.",
        "budget_warning_chat": "{percent}% of the {budget} is used. It resets at {when}.",
        "budget_warning_sender": "{percent}% of your personal {budget} is used (answers in "
        "groups count too). It resets at {when}.",
        "budget_day_tokens": "daily token budget",
        "budget_month_tokens": "monthly token budget",
        "budget_day_usd": "daily budget in dollars",
        "budget_month_usd": "monthly budget in dollars",
        "usage_title": "Tokens (input, of it cached, output) and estimated cost:",
        "usage_line": "{label}: {tokens} (input {input}, cached {cached}, output {output}){cost}",
        "usage_nothing": "{label}: nothing",
        "usage_last_turn": "Last answer",
        "usage_today": "Today",
        "usage_month": "This month",
        "usage_no_price": " (no price set for the model)",
        "usage_limits": "Budgets: {day} a day, {month} a month.",
        "usage_limits_usd": "Budgets in dollars: {day} a day, {month} a month.",
        "usage_unlimited": "unlimited",
        "usage_top_today": "Most tokens today:",
        "usage_top_month": "Most tokens this month:",
        "usage_top_none": "nobody",
        "usage_admins_only": "/usage all is for the bot's administrators.",
        "cmd_usage": "tokens spent and what they cost",
        # /erase and /export (issue 31)
        "cmd_erase": "erase everything I keep about you",
        "cmd_export": "send a file of everything I keep about you",
        "erase_confirm": (
            "Erase everything I keep about you in this chat: all messages, summaries, "
            "facts and their history, previous conversations, run records and settings? "
            "It cannot be undone. Press the button, or send /erase yes."
        ),
        "erase_confirm_terminal": (
            "Erase everything I keep about you: all messages, summaries, facts and their "
            "history, previous conversations, run records and settings? It cannot be "
            "undone. Send /erase yes to erase it."
        ),
        "erase_button": "Erase everything",
        "erased": "Done: I erased everything I kept about you ({messages} messages, "
        "{facts} facts, {compacts} previous conversations) and start from a clean slate.",
        "erase_failed": "Could not erase your data. Please try again a little later.",
        "export_caption": "Everything I keep about you: {name}",
        "export_written": "Everything I keep about you is written to:\n{paths}",
        "export_failed": "Could not build the export. Please try again a little later.",
    },
}
for _lang, _more in TASK_TEXTS.items():
    TEXTS[_lang].update(_more)


for _lang, _texts in MEMBER_TEXTS.items():
    TEXTS[_lang].update(_texts)


for _lang, _texts in EXPORT_TEXTS.items():
    TEXTS[_lang].update(_texts)


for _lang, _texts in TOOL_TEXTS.items():
    TEXTS[_lang].update(_texts)


for _lang, _texts in MODEL_TEXTS.items():
    TEXTS[_lang].update(_texts)


def t(key: str, language_code: str | None = None, **values: object) -> str:
    """Return the text `key` in the user's language, formatted with `values`."""
    text = TEXTS[lang_of(language_code)][key]
    return text.format(**values) if values else text


# What the live reply says while a tool runs (src/bot/live.py, the terminal chat).
STATUS_KEYS = {
    "search_history": "status_search",
    "recall_previous_conversations": "status_memory",
    "view_thread": "status_thread",
}


def status_line(tools: list[str], lang: str | None) -> str:
    """Say what the running tools do, in one line (never their arguments or output)."""
    keys = {STATUS_KEYS.get(name, "status_tool") for name in tools}
    key = keys.pop() if len(keys) == 1 else "status_tool"
    return t(key, lang)
