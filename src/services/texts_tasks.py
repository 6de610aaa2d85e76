"""The bot's words about time zones and scheduled tasks (issue 35), in Russian and
English; `src/services/texts.py` merges them into its TEXTS."""

from __future__ import annotations

TASK_TEXTS: dict[str, dict[str, str]] = {
    "ru": {
        "cmd_tz": "часовой пояс: /tz Europe/Berlin",
        "cmd_tasks": "запланированные задачи",
        "tz_show": "Ваш часовой пояс: {zone}, сейчас там {now}. Сменить: /tz Europe/Berlin",
        "tz_default": "Часовой пояс не выбран, я считаю время по {zone} (сейчас {now}). "
        "Выбрать свой: /tz Europe/Berlin",
        "tz_show_group": "Часовой пояс группы: {zone}, сейчас там {now}. Сменить "
        "(администраторы группы): /tz Europe/Berlin",
        "tz_default_group": "У группы не выбран часовой пояс, я считаю время по {zone} "
        "(сейчас {now}). Выбрать (администраторы группы): /tz Europe/Berlin",
        "tz_set": "Часовой пояс: {zone}, сейчас там {now}.",
        "tz_unknown": "Не знаю часового пояса «{zone}». Нужно название из базы IANA, "
        "например Europe/Berlin, America/New_York или Asia/Tokyo.",
        "tasks_none": "Запланированных задач нет. Попросите, например: «напомни завтра в 9 "
        "позвонить врачу».",
        "tasks_title": "Запланированные задачи ({zone}):",
        "tasks_paused": "Задачи на паузе: /mute — включить снова.",
        "task_missed": "   пропущено запусков: {count} (последний — {last}): я не смог до вас "
        "достучаться",
        "task_held": "⏰ Запланировано на {slot}, но тогда я не смог до вас достучаться:\n\n",
        "task_line": "#{id} {when}{repeat}: {instruction}",
        "task_repeat": " (повтор: {cron})",
        "task_cancel_button": "Отменить #{id}",
        "task_cancelled": "Задача #{id} отменена.",
        "task_not_found": "Задачи #{id} нет (уже отменена или выполнена).",
        "task_note": "[Запланированная задача #{id}, поставлена пользователем{late}: {text}]",
        "task_late": ", выполняется с опозданием: запланирована на {slot}",
        "export_md_tasks": "Запланированные задачи",
    },
    "en": {
        "cmd_tz": "your time zone: /tz Europe/Berlin",
        "cmd_tasks": "scheduled tasks",
        "tz_show": "Your time zone: {zone}, it is {now} there. Change it: /tz Europe/Berlin",
        "tz_default": "No time zone chosen: I count time in {zone} (now {now}). "
        "Choose yours: /tz Europe/Berlin",
        "tz_show_group": "The group's time zone: {zone}, it is {now} there. Change it "
        "(the group's administrators): /tz Europe/Berlin",
        "tz_default_group": "The group has no time zone chosen: I count time in {zone} "
        "(now {now}). Choose one (the group's administrators): /tz Europe/Berlin",
        "tz_set": "Time zone: {zone}, it is {now} there.",
        "tz_unknown": "I don't know the time zone “{zone}”. It must be an IANA name, "
        "like Europe/Berlin, America/New_York or Asia/Tokyo.",
        "tasks_none": "No scheduled tasks. Ask, for example: “remind me tomorrow at 9 to call "
        "the dentist”.",
        "tasks_title": "Scheduled tasks ({zone}):",
        "tasks_paused": "Tasks are paused: /mute turns them back on.",
        "task_missed": "   missed {count} time(s) (the last at {last}): I could not reach you",
        "task_held": "⏰ Due at {slot}, but I could not reach you then:\n\n",
        "task_line": "#{id} {when}{repeat}: {instruction}",
        "task_repeat": " (repeats: {cron})",
        "task_cancel_button": "Cancel #{id}",
        "task_cancelled": "Task #{id} is cancelled.",
        "task_not_found": "There is no task #{id} (cancelled or done already).",
        "task_note": "[Scheduled task #{id}, set by the user{late}: {text}]",
        "task_late": ", running late: it was due at {slot}",
        "export_md_tasks": "Scheduled tasks",
    },
}
