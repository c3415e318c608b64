"""The job's code on its road: packed at `up` (ignore rules, determinism, limits, links), put
in the store once per digest, fetched and verified by the agent (cached by digest), and a git
ref pinned to its commit and checked out."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from provisioner.jobcode import CodeError
from provisioner.jobcode.archive import pack, store_uri, unpack, upload
from provisioner.jobcode.fetch import MARKER, ensure_code
from provisioner.jobcode.git import checkout, pin
from provisioner.jobcode.ignore import included_files

MB = 1024 * 1024


def _tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
    return root


def _names(root: Path) -> list[str]:
    return [rel for rel, _ in included_files(root)]


def test_ignore_rules_at_every_level(tmp_path: Path) -> None:
    root = _tree(
        tmp_path / "w",
        {
            "train.py": "print(1)\n",
            ".gitignore": "*.log\nbuild/\n/data\n",
            ".provisionerignore": "*.ckpt\n!keep.ckpt\n",
            "run.log": "x",
            "keep.ckpt": "x",
            "drop.ckpt": "x",
            "build/out.o": "x",
            "data/big.bin": "x",
            "src/data/small.txt": "kept: /data anchors at the top",
            "src/.gitignore": "secret_stuff.txt\n!important.log\n",
            "src/secret_stuff.txt": "x",
            "src/important.log": "re-included below",
            "src/mod.py": "x",
            ".git/config": "never",
        },
    )
    assert _names(root) == [
        ".gitignore",
        ".provisionerignore",
        "keep.ckpt",
        "src/.gitignore",
        "src/data/small.txt",
        "src/important.log",
        "src/mod.py",
        "train.py",
    ]


def test_pack_is_deterministic_and_content_addressed(tmp_path: Path) -> None:
    a = _tree(tmp_path / "a", {"x.py": "print(1)\n", "pkg/y.py": "Y = 2\n"})
    b = _tree(tmp_path / "b", {"pkg/y.py": "Y = 2\n", "x.py": "print(1)\n"})
    os.utime(b / "x.py", (1, 1))  # other times, other order of creation: same archive
    pa, pb = pack(a, max_bytes=MB), pack(b, max_bytes=MB)
    assert pa.sha256 == pb.sha256 and pa.path.read_bytes() == pb.path.read_bytes()
    (b / "x.py").write_text("print(2)\n")
    assert pack(b, max_bytes=MB).sha256 != pa.sha256  # content changes the digest
    (a / "run.sh").write_text("#!/bin/sh\n")
    (a / "run.sh").chmod(0o755)
    with tarfile.open(pack(a, max_bytes=MB).path) as tar:
        modes = {m.name: m.mode for m in tar.getmembers()}
        assert {m.mtime for m in tar.getmembers()} == {0}
    assert modes["run.sh"] == 0o755 and modes["x.py"] == 0o644


def test_size_limit_names_the_largest_and_the_fix(tmp_path: Path) -> None:
    root = _tree(tmp_path / "w", {"a.py": "x", "data/blob.bin": b"\0" * (2 * MB)})
    with pytest.raises(CodeError) as err:
        pack(root, max_bytes=MB)
    text = str(err.value)
    assert "2.0 MB" in text and "data/" in text and ".provisionerignore" in text
    assert "workdir_max_mb" in text
    (root / ".provisionerignore").write_text("data/\n")
    assert pack(root, max_bytes=MB).files == 2  # a.py and the ignore file


def test_links_inside_kept_outside_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path / "w", {"real.py": "x"})
    (root / "alias.py").symlink_to("real.py")
    packed = pack(root, max_bytes=MB)
    dest = tmp_path / "out"
    unpack(packed.path, dest)
    assert os.readlink(dest / "alias.py") == "real.py"
    (root / "datasets").symlink_to("/etc")
    with pytest.raises(CodeError, match="outside the workdir"):
        pack(root, max_bytes=MB)


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(CodeError, match="not a directory"):
        pack(tmp_path / "nope", max_bytes=MB)


@pytest.mark.parametrize("name", ["../evil.txt", "/etc/evil.txt"])
def test_unpack_refuses_paths_out_of_the_tree(tmp_path: Path, name: str) -> None:
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
    with pytest.raises(CodeError):
        unpack(bad, tmp_path / "dest")
    assert not (tmp_path / "evil.txt").exists()


def test_upload_once_then_fetch_verify_and_cache(tmp_path: Path) -> None:
    root = _tree(tmp_path / "w", {"job.py": "print('hello')\n"})
    store = f"file://{tmp_path / 'store'}"
    packed = pack(root, max_bytes=MB)
    uri, sent = upload(packed, store)
    assert sent and uri == store_uri(store, packed.sha256)
    assert upload(packed, store) == (uri, False)  # the same digest is not sent twice
    code = {"kind": "archive", "uri": uri, "sha256": packed.sha256, "size": packed.size}

    vm, cache = tmp_path / "vm1", tmp_path / "cache"
    first = ensure_code(code, vm, cache)
    assert first.how == "fetched" and first.fetched_bytes == packed.size
    assert (vm / "code" / "job.py").read_text() == "print('hello')\n"
    again = ensure_code(code, vm, cache)  # an agent restarted on the same VM
    assert again.how == "in place" and again.fetched_bytes == 0
    second_vm = ensure_code(code, tmp_path / "vm2", cache)  # another VM with a warm cache
    assert second_vm.how == "cached" and second_vm.fetched_bytes == 0
    assert (tmp_path / "vm2" / "code" / MARKER).exists()


def test_damaged_store_copy_is_refused_and_a_damaged_cache_refetched(tmp_path: Path) -> None:
    root = _tree(tmp_path / "w", {"job.py": "print('hello')\n"})
    store = f"file://{tmp_path / 'store'}"
    packed = pack(root, max_bytes=MB)
    uri, _ = upload(packed, store)
    code = {"kind": "archive", "uri": uri, "sha256": packed.sha256, "size": packed.size}
    cache = tmp_path / "cache"
    ensure_code(code, tmp_path / "vm1", cache)
    cached = cache / "code" / f"sha256-{packed.sha256}.tar.gz"
    cached.write_bytes(b"junk")  # a damaged cache is fetched again, not trusted
    assert ensure_code(code, tmp_path / "vm2", cache).how == "fetched"
    Path(uri[len("file://") :]).write_bytes(b"tampered")
    cached.unlink()
    with pytest.raises(CodeError, match="damaged"):
        ensure_code(code, tmp_path / "vm3", cache)
    assert not (tmp_path / "vm3" / "code").exists()  # nothing half-unpacked is left to run


def _git(*args: str, cwd: Path) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    _git("init", "-q", "-b", "main", cwd=r)
    (r / "job.py").write_text("V = 1\n")
    _git("add", ".", cwd=r)
    _git("commit", "-q", "-m", "one", cwd=r)
    _git("tag", "-a", "v1", "-m", "v1", cwd=r)
    return r


def test_git_ref_pinned_and_checked_out(repo: Path, tmp_path: Path) -> None:
    first = _git("rev-parse", "HEAD", cwd=repo)
    assert pin(str(repo), "main") == first
    assert pin(str(repo), "v1") == first  # an annotated tag: its commit, peeled
    (repo / "job.py").write_text("V = 2\n")
    _git("commit", "-q", "-am", "two", cwd=repo)
    assert pin(str(repo), "main") != first  # the branch moved; the pin taken earlier holds
    code = {"kind": "git", "url": str(repo), "ref": "main", "commit": first}
    got = ensure_code(code, tmp_path / "vm", tmp_path / "cache")
    assert got.how == "cloned"
    assert (tmp_path / "vm" / "code" / "job.py").read_text() == "V = 1\n"
    with pytest.raises(CodeError, match=r"'nope' is not in .*main.*v1"):
        pin(str(repo), "nope")


def test_git_checkout_of_a_commit_that_is_not_there(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(CodeError):
        checkout(str(repo), "0" * 40, tmp_path / "dest")


def test_a_workdir_in_a_repository_follows_the_gitignore_files_above_it(tmp_path: Path) -> None:
    repo = _tree(
        tmp_path / "repo",
        {
            ".gitignore": "__pycache__/\n*.pyc\n/top-only.txt\n",
            "jobs/.gitignore": "data/\n",
            "jobs/a/train.py": "x",
            "jobs/a/__pycache__/train.cpython-311.pyc": "x",
            "jobs/a/data/big.bin": "x",
            "jobs/a/top-only.txt": "kept: the pattern is anchored at the repository's top",
        },
    )
    (repo / ".git").mkdir()
    assert _names(repo / "jobs" / "a") == ["top-only.txt", "train.py"]
    # outside any repository, only the workdir's own files count
    alone = _tree(tmp_path / "alone", {"x.pyc": "x", "y.py": "y"})
    assert _names(alone) == ["x.pyc", "y.py"]


def test_a_full_commit_id_is_checked_against_the_repository_at_up(
    repo: Path, tmp_path: Path
) -> None:
    """A 40-hex ref is no excuse to skip the repository: one that does not exist, or one
    without that commit, is refused at ``up`` with git's own words (not a sentence cut to its
    last line), and one that has it (a ref's head or any older commit) is pinned."""
    bare = tmp_path / "bare.git"
    _git("clone", "-q", "--bare", str(repo), str(bare), cwd=tmp_path)
    first = _git("rev-parse", "HEAD", cwd=repo)
    (repo / "job.py").write_text("V = 2\n")
    _git("commit", "-q", "-am", "two", cwd=repo)
    _git("push", "-q", str(bare), "main", cwd=repo)
    url = f"file://{bare}"
    assert pin(url, first) == first  # no ref's head names it: fetched by id
    second = _git("rev-parse", "HEAD", cwd=repo)
    assert pin(url, second.upper()) == second
    missing = f"file://{tmp_path / 'no-such-repo.git'}"
    with pytest.raises(CodeError) as gone:
        pin(missing, first)
    said = str(gone.value)
    assert "does not appear to be a git repository" in said and "no-such-repo" in said, said
    assert not said.startswith("git ls-remote failed: and the"), said
    with pytest.raises(CodeError, match=f"commit {'1' * 40} is not in {url}"):
        pin(url, "1" * 40)


def test_the_agent_s_checkout_error_keeps_git_s_words(tmp_path: Path) -> None:
    with pytest.raises(CodeError) as caught:
        checkout(f"file://{tmp_path / 'nope.git'}", "2" * 40, tmp_path / "dest")
    said = str(caught.value)
    assert "does not appear to be a git repository" in said, said
    assert "and the repository exists." in said  # git's whole explanation, first line first
