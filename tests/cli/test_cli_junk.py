"""Every command and option of the CLI, walked with junk arguments.

Each case runs the real entry point (``provisioner.cli.main``) in this process and checks the
exit code (2 for bad input; 3 for a job id that does not exist, as documented), that the
answer is one ``error:`` line on stderr and no exception escaped (no traceback), and that the
store is byte-for-byte as it was (its SQL dump): a refused command writes nothing. Stores that
cannot be used are real ones: a directory, a file that is not SQLite, a database opened
read-only (``mode=ro``, which holds for root too), and a file without write permission.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.api import submit
from provisioner.cli import main
from provisioner.control.store import Store

REPO = Path(__file__).resolve().parents[2]
POLICY = str(REPO / "policies" / "spot-finetune.yaml")


def dump(db: Path) -> list[str]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return list(con.iterdump())
    finally:
        con.close()


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:  # any other exception fails the test: a traceback
        main(args)
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 1), out, err


@pytest.fixture
def world(tmp_path: Path) -> dict[str, str]:
    store_db = tmp_path / "store.db"
    st = Store(f"sqlite:///{store_db}")
    _, job_id = submit(POLICY, provider="sim", store=st)
    st.close()
    (tmp_path / "adir").mkdir()
    (tmp_path / "corrupt.db").write_bytes(b"SQLite format 3\x00" + os.urandom(4096))
    (tmp_path / "text.db").write_text("this is not a database\n")
    (tmp_path / "bad.yaml").write_text("name: x\nbudget: {max_total: .inf}\n")
    bomb = ["a0: &a0 [" + ",".join("x" * 10) + "]"]
    bomb += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    (tmp_path / "bomb.yaml").write_text("\n".join(bomb) + "\n")
    (tmp_path / "trace.csv").write_text("garbage\n")
    hours = "".join(f"{3600 * h},{h % 3 != 0:d},0.9\n" for h in range(200))
    (tmp_path / "good-trace.csv").write_text("timestamp,available,price\n" + hours)
    (tmp_path / "daemon.yaml").write_text("reconcile_interval: 99999999999999999d\n")
    (tmp_path / "notify-missing.yaml").write_text(
        f"notify: {{targets_file: {tmp_path}/nope.yaml}}\n"
    )
    (tmp_path / "empty-targets.yaml").write_text("")
    (tmp_path / "empty-targets.yaml").chmod(0o600)
    (tmp_path / "notify-empty.yaml").write_text(
        f"notify: {{targets_file: {tmp_path}/empty-targets.yaml}}\n"
    )
    return {
        "dir": str(tmp_path),
        "db": str(store_db),
        "store": f"sqlite:///{store_db}",
        "job": job_id,
    }


# (arguments, expected exit code, text the error must contain). {store}, {dir} are filled in.
CASES: list[tuple[list[str], int, str]] = [
    # up: everything is checked before the job is recorded
    (
        ["up", "--policy", POLICY, "--provider", "nosuch", "--store", "{store}"],
        2,
        "unknown provider",
    ),
    (["up", "--policy", POLICY, "-o", "junk", "--store", "{store}"], 2, "expected KEY=VALUE"),
    (["up", "--policy", POLICY, "-o", "=1", "--store", "{store}"], 2, "expected KEY=VALUE"),
    (
        ["up", "--policy", POLICY, "-o", "region=[", "--store", "{store}"],
        2,
        "cannot read the value",
    ),
    (["up", "--policy", POLICY, "-o", "seed=.inf", "--store", "{store}"], 2, "finite number"),
    (["up", "--policy", POLICY, "-o", "seed=" + "9" * 50, "--store", "{store}"], 2, "longer than"),
    (["up", "--policy", POLICY, "-o", "seed={{a: 1}}", "--store", "{store}"], 2, "must be text"),
    (
        ["up", "--policy", POLICY, "-o", "nosuchopt=1", "--store", "{store}"],
        2,
        "not an option of the sim",
    ),
    (["up", "--policy", POLICY, "-o", "x y=1", "--store", "{store}"], 2, "KEY must be a name"),
    (
        ["up", "--policy", "{dir}/missing.yaml", "--store", "{store}"],
        2,
        "missing.yaml: no such file",
    ),
    (["up", "--policy", "{dir}", "--store", "{store}"], 2, "is a directory"),
    (["up", "--policy", ".", "--store", "{store}"], 2, ".: is a directory"),
    (["up", "--policy", "{dir}/[/x].yaml", "--store", "{store}"], 2, "[/x].yaml: no such file"),
    (
        ["up", "--policy", "{dir}/bad.yaml", "--store", "{store}"],
        2,
        "bad.yaml:2:21: budget.max_total",
    ),
    (["up", "--policy", "{dir}/bomb.yaml", "--store", "{store}"], 2, "bomb.yaml:4:38:"),
    (["up", "--policy", "/dev/zero", "--store", "{store}"], 2, "not a regular file"),
    (["up", "--store", "{store}"], 2, "Missing option '--policy'"),
    (
        ["up", "--policy", POLICY, "--detach", "--store", "sqlite:///{dir}/adir"],
        2,
        "cannot open the store",
    ),
    (
        ["up", "--policy", POLICY, "--detach", "--store", "sqlite:///{dir}/corrupt.db"],
        2,
        "cannot open the store",
    ),
    (
        ["up", "--policy", POLICY, "--detach", "--store", "sqlite:///{dir}/text.db"],
        2,
        "not a database",
    ),
    (
        ["up", "--policy", POLICY, "--detach", "--store", "{dir}/plain-path.db"],
        2,
        "cannot open the store",
    ),
    (["up", "--policy", POLICY, "--detach", "--store", "nosuchdb://x"], 2, "cannot open the store"),
    (
        ["up", "--policy", POLICY, "--detach", "--store", "sqlite:///file:{db}?mode=ro&uri=true"],
        2,
        "readonly database",
    ),
    # plan / policy / simulate
    (["plan", "--policy", "{dir}/missing.yaml"], 2, "no such file"),
    (["plan", "--policy", "{dir}"], 2, "is a directory"),
    (["plan", "--policy", POLICY, "--catalog", "{dir}/missing.csv"], 2, "cannot read catalog"),
    (["plan", "--policy", POLICY, "--catalog", "{dir}"], 2, "cannot read catalog"),
    (["plan", "--policy", POLICY, "--catalog", "{dir}/text.db"], 2, "unknown catalog layout"),
    (["plan", "--policy", POLICY, "--top", "0"], 2, "--top"),
    (["plan", "--policy", POLICY, "--top", "many"], 2, "--top"),
    (["plan", "--policy", POLICY, "--nosuch"], 2, "No such option"),
    (["policy", "check", "{dir}/bad.yaml", "{dir}/missing.yaml", "{dir}"], 2, "no such file"),
    (["policy", "check"], 2, "Missing argument"),
    (["policy", "nosuch"], 2, "No such command"),
    (["simulate", "--policy", POLICY, "--trace", "{dir}/missing.json"], 2, "cannot read trace"),
    (["simulate", "--policy", POLICY, "--trace", "{dir}"], 2, "cannot read trace"),
    (["simulate", "--policy", POLICY, "--trace", "{dir}/trace.csv"], 2, "trace.csv:1:"),
    (
        ["simulate", "--policy", POLICY, "--trace", "{dir}/good-trace.csv", "--work", "soon"],
        2,
        "--work",
    ),
    (
        [
            "simulate",
            "--policy",
            POLICY,
            "--trace",
            "{dir}/good-trace.csv",
            "--deadline",
            "99999999999999999d",
        ],
        2,
        "--deadline",
    ),
    (
        ["simulate", "--policy", POLICY, "--trace", "{dir}/good-trace.csv", "--changeover", "-5m"],
        2,
        "--changeover",
    ),
    (
        ["simulate", "--policy", POLICY, "--trace", "{dir}/trace.csv", "--windows", "0"],
        2,
        "--windows",
    ),
    (
        ["simulate", "--policy", POLICY, "--trace", "{dir}/trace.csv", "--strategy", "nosuch"],
        2,
        "unknown strategy",
    ),
    # catalog / providers
    (["catalog", "show", "--provider", "nosuch"], 2, "unknown provider"),
    (["catalog", "show", "--gpu", "NOPE"], 2, "unknown GPU"),
    (["catalog", "show", "--market", "cheap"], 2, "--market"),
    (["catalog", "show", "--limit", "-1"], 2, "--limit"),
    (["catalog", "show", "--catalog", "{dir}/missing.csv"], 2, "cannot read catalog"),
    (["catalog", "refresh", "--provider", "nosuch", "--store", "{store}"], 2, "unknown provider"),
    (
        ["catalog", "refresh", "--provider", "sim", "-o", "junk", "--store", "{store}"],
        2,
        "KEY=VALUE",
    ),
    (
        ["catalog", "refresh", "--provider", "sim", "-o", "bogus=1", "--store", "{store}"],
        2,
        "not an option",
    ),
    (["catalog", "refresh", "--store", "{store}"], 2, "Missing option '--provider'"),
    (["providers", "--nosuch"], 2, "No such option"),
    # the job commands
    (["status", "no-such-job", "--store", "{store}"], 3, "no job 'no-such-job'"),
    (["logs", "no-such-job", "--store", "{store}"], 3, "no job"),
    (["down", "no-such-job", "--store", "{store}"], 3, "no job"),
    (["cost", "no-such-job", "--store", "{store}"], 3, "no job"),
    (["logs", "--store", "{store}"], 2, "Missing argument"),
    (["jobs", "--store", "sqlite:///{dir}/adir"], 2, "cannot open the store"),
    (["jobs", "--store", "sqlite:///{dir}/corrupt.db"], 2, "cannot open the store"),
    (["status", "{job}", "--store", "sqlite:///{dir}/text.db"], 2, "not a database"),
    (["cost", "{job}", "--store", "{dir}/not-a-url"], 2, "cannot open the store"),
    (["down", "{job}", "--store", "sqlite:///file:{db}?mode=ro&uri=true"], 2, "readonly database"),
    (["cost", "{job}", "--store", "{store}", "--focus", "-", "--json"], 2, "choose one"),
    (["cost", "{job}", "--store", "{store}", "--focus", "{dir}/adir"], 2, "cannot write"),
    # notifications
    (["notify", "test", "--config", "{dir}/missing.yaml"], 2, "missing.yaml: no such file"),
    (["notify", "test", "--config", "{dir}/daemon.yaml"], 2, "reconcile_interval"),
    (["notify", "test", "--config", "{dir}/notify-missing.yaml"], 2, "nope.yaml: no such file"),
    (["notify", "test", "--config", "{dir}/notify-empty.yaml"], 2, "no notification targets"),
    (["notify", "test", "--target"], 2, "requires an argument"),
    (["notify", "nosuch"], 2, "No such command"),
    (["nosuchcommand"], 2, "No such command"),
    (["-v", "--nosuch"], 2, "No such option"),
]


@pytest.mark.parametrize(
    ("args", "code", "expect"), CASES, ids=[" ".join(c[0])[:70] for c in CASES]
)
def test_junk_arguments(
    args: list[str],
    code: int,
    expect: str,
    world: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [a.format(**world) for a in args]
    before = dump(Path(world["db"]))
    rc, out, err = run(argv, capsys)
    assert rc == code, (rc, out, err)
    assert expect in err, err
    assert err.startswith("error: ") and "Traceback" not in out + err, err
    assert dump(Path(world["db"])) == before, "a refused command changed the store"


def test_a_store_file_without_write_permission(
    world: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    db = Path(world["db"])
    os.chmod(db, 0o444)
    os.chmod(db.parent, 0o555)
    try:
        if os.access(db, os.W_OK):
            pytest.skip("running as root: permissions do not stop writes (mode=ro covers it)")
        before = dump(db)
        rc, _, err = run(["up", "--policy", POLICY, "--detach", "--store", world["store"]], capsys)
        assert rc == 2 and "store" in err and "Traceback" not in err, err
        assert dump(db) == before
    finally:
        os.chmod(db.parent, 0o755)
        os.chmod(db, 0o644)


def test_a_refused_up_records_no_job(
    world: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: `up --provider nosuch` used to create and print a job, then die."""
    rc, out, _err = run(
        ["up", "--policy", POLICY, "--provider", "nosuch", "--store", world["store"]], capsys
    )
    assert rc == 2 and out == ""
    st = Store(world["store"])
    try:
        assert [j.id for j in st.jobs()] == [world["job"]]  # only the one submitted before
    finally:
        st.close()


def test_junk_as_a_real_process(world: dict[str, str]) -> None:
    """The console script itself (not just main()): exit 2, one error line, no traceback."""
    for args in (
        ["up", "--policy", POLICY, "--provider", "nosuch", "--store", world["store"]],
        ["daemon", "--store", f"sqlite:///{world['dir']}/adir"],
        ["daemon", "--config", world["dir"]],
        ["daemon", "--config", f"{world['dir']}/missing.yaml"],
        ["daemon", "--config", f"{world['dir']}/daemon.yaml"],
        ["daemon", "--config", f"{world['dir']}/notify-missing.yaml"],
        ["daemon", "--metrics-port", "many"],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "provisioner", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        text = proc.stdout + proc.stderr
        assert proc.returncode == 2, (args, text)
        assert "Traceback" not in text and "error" in text, (args, text)
        assert ":0:0" not in text
