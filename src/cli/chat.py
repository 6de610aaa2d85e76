"""`tgagent chat`: talk to the agent in the terminal, through the very same service."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from src.cli.chat_keys import Keys, Lines
from src.services.texts import status_line, t

# The service and what it brings (LangChain, LangGraph, psycopg) are imported when the
# chat starts, after its first prompt: not for `tgagent --help` or another command.
if TYPE_CHECKING:
    from src.config import Settings
    from src.services.agent_service import AgentService, Identity, TurnStream

EXIT_COMMANDS = frozenset({"/exit", "/quit", "/q"})
PROMPT = "you> "


def register(sub: Any, db_sub: Any) -> None:
    """Add `tgagent chat`."""
    del db_sub
    parser = sub.add_parser("chat", help="chat with the agent in the terminal")
    parser.add_argument("--user-id", type=int, default=1, help="whose memory to use (default 1)")
    parser.add_argument(
        "--lang",
        default=None,
        help="language of the bot's own texts (ru|en; default: the terminal's, from LANG)",
    )
    # Replies go to stdout; only warnings go to stderr unless --log-level says otherwise,
    # one line each (tracebacks with --log-level DEBUG).
    parser.set_defaults(handler=run_chat, quiet_logs=True)


def format_memory(report: dict[str, Any], lang: str) -> str:
    """Return /memory for the terminal: its dates in the owner's zone, as the bot's."""
    from src.storage.memory_repo import fact_value

    zone = report.get("zone")
    window, stored = report["window"], report["stored_messages"]
    shown = report.get("in_window", min(window, stored))
    lines = [
        f"window: {shown} of {window} messages, stored: {stored}",
        f"reminders: {'on' if report['reminders'] else 'off'}",
    ]
    if report["summary"]:
        lines.append("summary: " + report["summary"])
    for fact in report["facts"]:
        line = f"fact ({fact['type']}, {fact['importance']}): {fact['key']} = "
        line += fact_value(fact["value"])
        if fact.get("previous_value"):
            until = f"{fact['previous_until'].astimezone(zone):%Y-%m-%d}"
            line += t("memory_was", lang, value=fact_value(fact["previous_value"]), date=until)
        lines.append(line)
    for compact in report["compacts"]:
        lines.append(
            f"previous conversation {compact['created_at'].astimezone(zone):%Y-%m-%d}: "
            + compact["summary"]
        )
    return "\n".join(lines)


async def answer_line(
    service: AgentService, identity: Identity, line: str, stream: TurnStream | None = None
) -> str:
    """Return the agent's answer to one line typed in the terminal (`stream`: watch the
    turn's answer as it is written)."""
    lang = identity.language_code
    command, _, rest = line.strip().partition(" ")
    if command in ("/help", "/start"):
        return t("help_terminal", lang)  # the commands of this chat, not the bot's
    if command == "/new":
        await service.new_conversation(identity)
        return t("new", lang)
    if command == "/forget":
        await service.forget(identity)
        return t("forget", lang)
    if command == "/mute":
        return t("unmuted" if await service.toggle_mute(identity) else "muted", lang)
    if command == "/memory":
        word, _, key = rest.strip().partition(" ")
        if word == "clear":
            facts, compacts = await service.clear_memory(identity)
            return t("memory_cleared", lang, facts=facts, compacts=compacts)
        if word == "forget":
            return await forget_fact(service, identity, key)
        return format_memory(await service.memory_report(identity), lang or "ru")
    if command in ("/export", "/erase"):
        return await own_data(service, identity, command, rest)
    if command == "/tools":
        from src.services.tools_view import tools_text

        return tools_text(service.deps.mcp, identity, lang)
    if command.startswith("/") and len(command) > 1 and " " not in command:
        return t("unknown_command", lang)
    return (await service.handle_message(identity, line, stream=stream)).reply


async def own_data(
    service: AgentService, identity: Identity, command: str, rest: str, where: Path | None = None
) -> str:
    """/export: write everything kept about the user into files in `where` (default: the
    working directory) and say where; /erase: ask to confirm; /erase yes: erase it all."""
    from src.services.erasure import CONFIRM_WORDS, erased_sentence
    from src.services.export import write_files

    lang = identity.language_code
    if command == "/export":
        paths = write_files(await service.export(identity), where or Path.cwd())
        return t("export_written", lang, paths="\n".join(str(p) for p in paths))
    if rest.strip().lower() not in CONFIRM_WORDS:
        return t("erase_confirm_terminal", lang)
    return erased_sentence(await service.erase(identity), lang)


async def forget_fact(service: AgentService, identity: Identity, key: str) -> str:
    """/memory forget KEY: delete one fact, as the bot's command does."""
    lang = identity.language_code
    if not key.strip():
        return t("memory_forget_usage", lang)
    forgotten = await service.forget_fact(identity, key)
    if forgotten is None:
        return t("memory_no_such_fact", lang, name=key.strip())
    return t("memory_forgot", lang, name=forgotten)


class Printer:
    """Print a turn's answer as the model writes it; then only what differs."""

    def __init__(self, stdout: TextIO, lang: str | None) -> None:
        from src.services.agent_service import TurnStream

        self.stdout = stdout
        self.lang = lang
        self.written = ""
        self.stream = TurnStream(self._text, self._tools)

    def _text(self, piece: str) -> None:
        self.written += piece
        self.stdout.write(piece)
        self.stdout.flush()

    def _tools(self, names: list[str]) -> None:
        # What was written before the tools ran was not the answer: a new line begins.
        if self.written:
            self.stdout.write("\n")
        self.stdout.write(f"({status_line(names, self.lang)})\n")
        self.stdout.flush()
        self.written = ""

    def end(self, reply: str) -> None:
        """Finish the line: the rest of the reply, or all of it when it differs."""
        shown = self.written.strip()
        if shown and reply.startswith(shown):
            self.stdout.write(reply[len(shown) :].rstrip() + "\n")
        else:
            self.stdout.write(("\n" if self.written else "") + reply + "\n")
        self.stdout.flush()


async def chat_loop(
    service: AgentService,
    identity: Identity,
    stdin: TextIO,
    stdout: TextIO,
    stream: bool = True,
    prompted: bool = False,
    keys: Keys | None = None,
) -> None:
    """Read lines until EOF, /exit or a quit (`keys`: Ctrl+C), answering each (`stream`:
    as it is written, when a person types at a terminal; `prompted`: the first prompt is
    already shown)."""
    keys = keys or Keys()
    lines = Lines(stdin)
    try:
        await _chat_lines(service, identity, lines, stdin.isatty(), stdout, stream, prompted, keys)
    finally:
        service.deps.replies.expecting(False)  # no more replies: memory work may go


async def _chat_lines(
    service: AgentService,
    identity: Identity,
    lines: Lines,
    interactive: bool,
    stdout: TextIO,
    stream: bool,
    prompted: bool,
    keys: Keys,
) -> None:
    while True:
        if interactive and not prompted:
            stdout.write(PROMPT)
            stdout.flush()
        prompted = False
        line = await keys.until_quit(lines.next())
        if not line:  # the end of input, or Ctrl+C at the prompt
            break
        line = line.rstrip("\n")
        if line.strip() in EXIT_COMMANDS:
            break
        if not line.strip():
            continue
        if interactive:
            stdout.write("bot> ")
        # Piped output keeps one line per answer; a person watches it being written.
        live = stream and interactive
        printer = Printer(stdout, identity.language_code) if live else None
        watch = printer.stream if printer is not None else None
        keys.reply = watch.stop if watch is not None else None  # what Ctrl+C stops
        try:
            reply = await keys.until_quit(answer_line(service, identity, line, watch))
        finally:
            keys.reply = None
        if reply is None:  # a second Ctrl+C while the stopped reply was ending
            stdout.write("\n")
            stdout.flush()
            break
        if printer is not None:
            printer.end(reply)
        else:
            stdout.write(reply + "\n")
            stdout.flush()
        # Lines typed ahead: their replies go before memory work (src/graph/memory/idle.py).
        service.deps.replies.expecting(lines.waiting() > 0)


def _ctrl_c() -> Keys:
    """Return the chat's keys, Ctrl+C (SIGINT) handled by them from now on."""
    keys = Keys()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, keys.interrupt)
    return keys


async def find_model(settings: Settings, lang: str) -> Settings | None:
    """Return settings with a model endpoint: the configured one, else a local server.

    Without either, print the ways to configure one (in `lang`) and return None.
    """
    from src.config import model_configured
    from src.services import local_model
    from src.services.window_probe import ask_windows, model_line

    found = None
    if not model_configured(settings):
        found = await asyncio.to_thread(local_model.discover, settings.llm_model)
        if found is None:
            where = ", ".join(url for _, url in local_model.candidates()) or "-"
            print(t("chat_no_model", lang, where=where), file=sys.stderr)  # noqa: T201
            return None
        update = {"openai_base_url": found.base_url, "llm_model": found.model}
        settings = settings.model_copy(update=update)
    window = await asyncio.to_thread(ask_windows, settings)
    print(model_line(settings, window, lang, found), file=sys.stderr)  # noqa: T201
    return settings


async def run_chat(args: argparse.Namespace, settings: Settings) -> int:
    """Run the terminal chat until EOF."""
    from src.cli.logging_setup import one_line_logs
    from src.graph.lang import terminal_lang

    one_line_logs()
    lang = args.lang or terminal_lang()
    if settings.mcp_config is not None:
        from src.graph.mcp.config import load_config

        load_config(settings.mcp_config)  # a bad file: one line before anything starts
    configured = await find_model(settings, lang)
    if configured is None:
        return 2
    # The first prompt before the runtime (imports, the database): a person can start
    # typing meanwhile, and the line is read once the runtime is there.
    prompted = sys.stdin.isatty()
    if prompted:
        sys.stdout.write(PROMPT)
        sys.stdout.flush()
    try:
        from src.graph.rights import Role
        from src.services.agent_service import Identity
        from src.services.factory import build_runtime

        runtime = await build_runtime(configured)
    except BaseException:
        if prompted:  # the error's line starts on a line of its own
            sys.stdout.write("\n")
            sys.stdout.flush()
        raise
    keys = _ctrl_c()
    try:
        identity = Identity(args.user_id, getpass.getuser(), None, lang, role=Role.TERMINAL)
        await chat_loop(
            runtime.service,
            identity,
            sys.stdin,
            sys.stdout,
            configured.stream_replies,
            prompted,
            keys,
        )
    finally:
        # A Ctrl+C while the work after the last reply ends interrupts that wait.
        asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
        await runtime.close()
    return 0
