"""`statewise run`, `--replay` and `state show|history|diff`, through CliRunner and a real
subprocess."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from statewise.cli import app
from tests._env import subprocess_env

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "session_state_agent"
ANSWER = "Hello! How can I help you verify something today?"

runner = CliRunner()

AGENT_FILE = '''
from statewise import Agent, RunContext
from statewise.models import FunctionModel


def remember(run_context: RunContext, item: str) -> str:
    """Remember an item."""
    run_context.session_state.setdefault("items", []).append(item)
    return "ok"


def answer(messages, info):
    from statewise.models import ModelResponse, ToolCall
    last = messages[-1]
    if last.role == "user" and last.content.startswith("remember "):
        return ModelResponse(tool_calls=[ToolCall("remember", {"item": last.content[9:]}, "c1")])
    return "hello {name?}".replace("{name?}", "") + "|" + last.content


helper = Agent(model=FunctionModel(answer), name="helper", tools=[remember], output_key="last")
'''


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_agent.py").write_text(AGENT_FILE)
    return tmp_path


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


# ---- run -----------------------------------------------------------------------------------


def test_run_one_message_then_continue_the_session(workdir: Path) -> None:
    db = f"sqlite:///{workdir / 'a.db'}"
    code, out, err = invoke("run", "my_agent.py", "remember milk", "--session", "s1", "--db", db)
    assert code == 0, err
    assert out.splitlines() == ["[user]: remember milk", "[helper]: hello |ok"]
    assert "--session s1" in err
    code, out, _ = invoke(
        "run", "my_agent.py:helper", "remember eggs", "--session", "s1", "--db", db, "--show-state"
    )
    assert code == 0
    state = json.loads(out.split("[state]:", 1)[1])
    assert state == {"items": ["milk", "eggs"], "last": "hello |ok"}
    code, out, _ = invoke("state", "show", "s1", "--db", db, "--json")
    assert code == 0 and json.loads(out) == state


def test_long_answers_are_not_hard_wrapped(workdir: Path) -> None:
    long = "word " * 60
    code, out, _ = invoke("run", "my_agent.py", long.strip())
    assert code == 0
    assert out.splitlines()[1] == f"[helper]: hello |{long.strip()}"


def test_run_with_state_and_user(workdir: Path) -> None:
    db = f"sqlite:///{workdir / 'b.db'}"
    code, out, err = invoke(
        "run", "my_agent.py", "hi", "--session", "s", "--user", "ann", "--db", db,
        "--state", '{"items": ["x"], "user:name": "Ann"}', "--show-state",
    )  # fmt: skip
    assert code == 0, err
    state = json.loads(out.split("[state]:", 1)[1])
    assert state == {"items": ["x"], "user:name": "Ann", "last": "hello |hi"}
    code, out, _ = invoke("state", "show", "s", "--db", db)
    assert code == 0 and "user ann" in out and '"user:name": "Ann"' in out


def test_replay_runs_each_query_on_one_session(workdir: Path) -> None:
    (workdir / "input.json").write_text(
        json.dumps({"state": {"items": ["start"]}, "queries": ["remember a", "remember b", "bye"]})
    )
    db = f"sqlite:///{workdir / 'c.db'}"
    code, out, err = invoke("run", "my_agent.py", "--replay", "input.json", "--db", db)
    assert code == 0, err
    assert out.splitlines() == [
        "[user]: remember a",
        "[helper]: hello |ok",
        "[user]: remember b",
        "[helper]: hello |ok",
        "[user]: bye",
        "[helper]: hello |bye",
    ]
    session = err.split("--session ", 1)[1].split(";")[0].strip()
    code, out, _ = invoke("state", "show", session, "--db", db, "--json")
    assert json.loads(out) == {"items": ["start", "a", "b"], "last": "hello |bye"}


def test_db_option_overrides_the_agents_own_db(workdir: Path) -> None:
    (workdir / "own_db.py").write_text(
        AGENT_FILE.replace('output_key="last")', 'output_key="last", db="sqlite:///own.db")')
    )
    code, _, err = invoke(
        "run", "own_db.py", "remember z", "--session", "o", "--db", "sqlite:///other.db"
    )
    assert code == 0, err
    assert invoke("state", "show", "o", "--db", "sqlite:///other.db", "--json")[0] == 0
    code, _, err = invoke("state", "show", "o", "--db", "sqlite:///own.db")
    assert code == 2 and "no session 'o'" in err


def test_the_agent_is_found_by_default_names(workdir: Path) -> None:
    (workdir / "two.py").write_text(
        AGENT_FILE + "\nroot_agent = Agent(model=FunctionModel(lambda m, i: 'root'), name='r')\n"
    )
    code, out, _ = invoke("run", "two.py", "hi")
    assert code == 0 and "[r]: root" in out
    (workdir / "unnamed.py").write_text(
        "from statewise import Agent\nfrom statewise.models import FunctionModel\n"
        "agent = Agent(model=FunctionModel(lambda m, i: 'anon'))\n"
    )
    code, out, _ = invoke("run", "unnamed.py", "hi")
    assert code == 0 and "[agent]: anon" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "missing.py", "hi"], "no such file: missing.py"),
        (["run", "empty.py", "hi"], "no Agent, Team or Workflow in empty.py"),
        (["run", "several.py", "hi"], "several agents (a, b)"),
        (["run", "my_agent.py:nope", "hi"], "my_agent.py has no 'nope'"),
        (["run", "my_agent.py:remember", "hi"], "is a function, not an Agent"),
        (["run", "my_agent.py", "hi", "--state", "{bad"], "--state is not valid JSON"),
        (["run", "my_agent.py", "hi", "--state", "[1]"], "--state must be a JSON object"),
        (["run", "my_agent.py"], "give either a message or --replay FILE"),
        (["run", "my_agent.py", "--replay", "nope.json"], "no such replay file"),
        (["run", "my_agent.py", "--replay", "bad.json"], '"queries" must be a list'),
        (["run", "broken.py", "hi"], "importing broken.py failed: ZeroDivisionError"),
        (["run", "my_agent.py", "hi", "--db", "ftp://x"], "unknown database URL scheme"),
        (["state", "show", "s", "--db", "sqlite:///none.db"], "no database file at none.db"),
        (["state", "show", "s"], "pass --db URL"),
        (["state", "history", "ghost", "--db", "sqlite:///e.db"], "no session 'ghost'"),
        (["state", "diff", "ghost", "--db", "sqlite:///e.db"], "no session 'ghost'"),
        (["state", "show", "ghost", "--db", "sqlite:///e.db"], "no session 'ghost'"),
    ],
)
def test_clear_errors_exit_2_without_a_traceback(
    workdir: Path, args: list[str], message: str
) -> None:
    (workdir / "empty.py").write_text("x = 1\n")
    (workdir / "several.py").write_text(
        "from statewise import Agent\na = Agent(name='a')\nb = Agent(name='b')\n"
    )
    (workdir / "bad.json").write_text('{"queries": "hello"}')
    (workdir / "broken.py").write_text("1 / 0\n")
    invoke("run", "my_agent.py", "hi", "--session", "real", "--db", "sqlite:///e.db")
    code, out, err = invoke(*args)
    assert code == 2, (out, err)
    assert message in err
    assert "Traceback" not in out + err


def test_a_failing_run_exits_1_with_the_error(workdir: Path) -> None:
    (workdir / "fails.py").write_text(
        "from statewise import Agent\nfrom statewise.models import FunctionModel\n"
        "def cb(callback_context):\n    assert False, 'callback said no'\n"
        "agent = Agent(model=FunctionModel(lambda m, i: 'x'), before_agent_callback=cb)\n"
    )
    code, _, err = invoke("run", "fails.py", "hi")
    assert code == 1
    assert "the run failed: AssertionError: callback said no" in err
    assert "Traceback" not in err
    code, _, err = invoke("run", "fails.py", "hi", "--traceback")
    assert code == 1 and "Traceback" in err


def test_state_history_and_diff(workdir: Path) -> None:
    db = f"sqlite:///{workdir / 'h.db'}"
    for item in ("milk", "eggs"):
        assert (
            invoke("run", "my_agent.py", f"remember {item}", "--session", "h", "--db", db)[0] == 0
        )
    code, out, _ = invoke("state", "history", "h", "--db", db, "--json")
    assert code == 0
    history = json.loads(out)
    sources = [s["source"] for d in history for s in d["segments"]]
    assert sources == ["tool:remember#c1", "output_key", "tool:remember#c1", "output_key"]
    code, out, _ = invoke("state", "history", "h", "--db", db)
    assert code == 0 and "tool:remember" in out and "output_key" in out and '"eggs"' in out
    code, out, _ = invoke("state", "diff", "h", "--from", "0", "--to", "2", "--db", db)
    assert code == 0
    assert out.splitlines() == ['+ items = ["milk"]', '+ last = "hello |ok"']
    code, out, _ = invoke("state", "diff", "h", "--from", "2", "--db", db, "--json")
    assert json.loads(out) == [
        {"path": ["items"], "kind": "changed", "before": ["milk"], "after": ["milk", "eggs"]}
    ]
    run_id = history[0]["run_id"]
    code, out, _ = invoke("state", "show", "h", "--at", run_id, "--db", db, "--json")
    assert code == 0 and json.loads(out) == {"items": ["milk"], "last": "hello |ok"}
    code, _, err = invoke("state", "diff", "h", "--from", "nosuchrun", "--db", db)
    assert code == 2 and "run 'nosuchrun' made no change" in err


def test_demo_hint_works_from_any_directory_and_any_shell(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = invoke("demo", "--db-file", "tmp/demo.db")
    assert code == 0, err
    absolute = (workdir / "tmp" / "demo.db").resolve()
    hint = f'statewise state show alice-groceries --db "sqlite:///{absolute}"'
    assert hint in out
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    url = hint.split('"')[1]
    code, out, err = invoke("state", "show", "alice-groceries", "--db", url)
    assert code == 0, err
    assert "user alice" in out and '"bananas"' in out
    # The hint after `statewise run` and under `state history` is quoted and absolute too.
    monkeypatch.chdir(workdir)
    _, _, err = invoke("run", "my_agent.py", "hi", "--db", "sqlite:///tmp/run.db")
    assert f'--db "sqlite:///{(workdir / "tmp" / "run.db").resolve()}"' in err


def test_versions_beyond_the_current_one_are_errors(workdir: Path) -> None:
    db = f"sqlite:///{workdir / 'v.db'}"
    assert invoke("run", "my_agent.py", "remember tea", "--session", "v", "--db", db)[0] == 0
    code, out, _ = invoke("state", "show", "v", "--db", db)
    assert code == 0 and "version 2" in out
    for args in (
        ("show", "v", "--at", "99"),
        ("diff", "v", "--from", "99"),
        ("diff", "v", "--from", "0", "--to", "99"),
    ):
        code, out, err = invoke("state", *args, "--db", db)
        assert code == 2, (args, out)
        assert "there is no version 99" in err and "is at version 2" in err
        assert out == ""
    code, out, _ = invoke("state", "show", "v", "--at", "2", "--db", db, "--json")
    assert code == 0 and json.loads(out)["items"] == ["tea"]


def test_help_is_there_for_a_newcomer() -> None:
    code, out, _ = invoke("--help")
    assert code == 0 and all(word in out for word in ("run", "state", "demo"))
    code, out, _ = invoke("run", "--help")
    assert code == 0 and "--replay" in out and "root_agent" in out and "Examples" in out
    code, out, _ = invoke("state", "--help")
    assert code == 0 and all(word in out for word in ("show", "history", "diff"))


# ---- the seed 004 sample ------------------------------------------------------------------

SEED_004_LINES = [
    "[user]: hello world!",
    "===================== In before_agent_callback ==============================",
    "** Asserting keys are cached in context: ['before_agent_callback_state_key'] pass ✅",
    "** Asserting keys are already persisted in session: [] pass ✅",
    "** Asserting keys are not persisted in session yet: ['before_agent_callback_state_key'] pass ✅",
    "============================================================",
    "===================== In before_model_callback ==============================",
    "** Asserting keys are cached in context: ['before_agent_callback_state_key', 'before_model_callback_state_key'] pass ✅",
    "** Asserting keys are already persisted in session: ['before_agent_callback_state_key'] pass ✅",
    "** Asserting keys are not persisted in session yet: ['before_model_callback_state_key'] pass ✅",
    "============================================================",
    "===================== In after_model_callback ==============================",
    "** Asserting keys are cached in context: ['before_agent_callback_state_key', 'before_model_callback_state_key', 'after_model_callback_state_key'] pass ✅",
    "** Asserting keys are already persisted in session: ['before_agent_callback_state_key'] pass ✅",
    "** Asserting keys are not persisted in session yet: ['before_model_callback_state_key', 'after_model_callback_state_key'] pass ✅",
    "============================================================",
    "===================== In after_agent_callback ==============================",
    "** Asserting keys are cached in context: ['before_agent_callback_state_key', 'before_model_callback_state_key', 'after_model_callback_state_key', 'after_agent_callback_state_key'] pass ✅",
    "** Asserting keys are already persisted in session: ['before_agent_callback_state_key', 'before_model_callback_state_key', 'after_model_callback_state_key'] pass ✅",
    "** Asserting keys are not persisted in session yet: ['after_agent_callback_state_key'] pass ✅",
    "============================================================",
    f"[root_agent]: {ANSWER}",
]


def test_seed_004_sample_through_cli_runner(workdir: Path) -> None:
    code, out, err = invoke(
        "run", str(SAMPLE), "--replay", str(SAMPLE / "input.json"),
        "--db", f"sqlite:///{workdir / 'seed004.db'}",
    )  # fmt: skip
    assert code == 0, err
    assert out.splitlines() == SEED_004_LINES


def test_seed_004_sample_in_a_real_subprocess(tmp_path: Path) -> None:
    """`python -m statewise run examples/session_state_agent --replay .../input.json`,
    with the sample's own database (relative to the working directory)."""
    proc = subprocess.run(
        [
            sys.executable, "-m", "statewise", "run",
            str(SAMPLE), "--replay", str(SAMPLE / "input.json"),
        ],
        cwd=tmp_path,
        env=subprocess_env(PYTHONIOENCODING="utf-8", COLUMNS="200"),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == SEED_004_LINES
    assert (tmp_path / "tmp" / "session_state_agent.db").is_file()
    session = proc.stderr.split("--session ", 1)[1].split(";")[0].strip()
    show = subprocess.run(
        [
            sys.executable, "-m", "statewise", "state", "show", session, "--json",
            "--db", "sqlite:///tmp/session_state_agent.db",
        ],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert show.returncode == 0, show.stderr
    assert json.loads(show.stdout) == {
        "before_agent_callback_state_key": True,
        "before_model_callback_state_key": True,
        "after_model_callback_state_key": True,
        "after_agent_callback_state_key": True,
    }


def test_a_usage_error_in_a_real_subprocess_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "statewise", "run", "nowhere.py", "hi"],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "no such file: nowhere.py" in proc.stderr and "Traceback" not in proc.stderr


def test_the_sample_agent_file_defines_root_agent() -> None:
    source = (SAMPLE / "agent.py").read_text(encoding="utf-8")
    assert "root_agent = Agent(" in source
    assert json.loads((SAMPLE / "input.json").read_text()) == {
        "state": {},
        "queries": ["hello world!"],
    }


def test_state_history_tells_runs_apart_and_dates_carry_year_and_zone(workdir: Path) -> None:
    """Time-ordered run ids share their first characters: the table shows them whole."""
    db = f"sqlite:///{workdir / 'ids.db'}"
    for item in ("milk", "eggs"):
        assert (
            invoke("run", "my_agent.py", f"remember {item}", "--session", "i", "--db", db)[0] == 0
        )
    _, out, _ = invoke("state", "history", "i", "--db", db, "--json")
    run_ids = {d["run_id"] for d in json.loads(out)}
    assert len(run_ids) == 2
    result = CliRunner().invoke(app, ["state", "history", "i", "--db", db], env={"COLUMNS": "250"})
    assert result.exit_code == 0
    shown = [f"…{run_id[-8:]}" for run_id in run_ids]
    assert all(label in result.stdout for label in shown) and shown[0] != shown[1]
    year = str(__import__("datetime").date.today().year)
    stamps = re.findall(rf"{year}-\d\d-\d\d \d\d:\d\d:\d\d[+-]\d\d:\d\d", result.stdout)
    assert len(stamps) == 4, result.stdout


def test_unique_tails_tell_time_ordered_ids_apart() -> None:
    from statewise.cli._state import unique_tails

    ids = ["0190aaaa-0000-7000-8000-00000000000a", "0190aaaa-0000-7000-8000-10000000000a"]
    assert unique_tails(ids) == {
        ids[0]: "…00000000000a",
        ids[1]: "…10000000000a",
    }
    assert unique_tails(["short"]) == {"short": "short"}


def _help_texts(typer_app: typer.Typer) -> list[str]:
    texts = [c.help or "" for c in typer_app.registered_commands]
    for group in typer_app.registered_groups:
        assert group.typer_instance is not None
        texts.append(str(group.typer_instance.info.help or ""))
        texts += _help_texts(group.typer_instance)
    return texts


def test_help_texts_are_paragraphs_not_the_docstrings_line_breaks() -> None:
    """A single newline in a help text shows as a broken line at any terminal width."""
    texts = _help_texts(app)
    assert len(texts) > 20
    for text in texts:
        assert "\n" not in text.replace("\n\n", ""), text
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert (
        "Serve agents, teams and workflows over HTTP, with a web page at / and API docs at /docs."
        in result.stdout
    )
