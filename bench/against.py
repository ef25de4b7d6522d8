"""The tree ``micro --against REF`` compares the working tree with: REF checked out in a temporary
git worktree, removed afterwards whatever ends the run.

Why a worktree: the base must be that commit's files while the change is the working tree as it
is, uncommitted edits included, and neither may be touched. ``git worktree add --detach`` checks
REF out elsewhere from the same repository (no clone, no network), on no branch.

The default REF is the merge base of HEAD and the branch it follows (its upstream, else ``main``):
what the branch changed. On ``main`` itself that is HEAD, so the default compares the uncommitted
working tree with the last commit.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

DEFAULT_BRANCH = "main"


class GitError(RuntimeError):
    """A git command failed; the message says which and why."""


def git(root: Path, *args: str, strip: bool = True) -> str:
    """The output of ``git -C root args`` (stripped unless ``strip`` is false: porcelain status
    lines start with a space); raises ``GitError``."""
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)  # noqa: S603, S607
    if done.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip() if strip else done.stdout


def upstream(root: Path) -> str | None:
    """The branch HEAD's branch follows, or None."""
    try:
        return git(root, "rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{upstream}") or None
    except GitError:
        return None


def default_ref(root: Path) -> tuple[str, str]:
    """The default base: (commit, how it was chosen)."""
    target = upstream(root) or DEFAULT_BRANCH
    base = git(root, "merge-base", "HEAD", target)
    head = git(root, "rev-parse", "HEAD")
    why = f"the merge base of HEAD and {target}"
    return base, why + (" (HEAD itself)" if base == head else "")


def resolve(root: Path, ref: str) -> str:
    """The full commit id ``ref`` names (any commit-ish)."""
    return git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")


@dataclass(frozen=True, slots=True)
class Side:
    """What one side of the comparison ran, for the report."""

    commit: str
    subject: str
    changed: list[str]
    """Files under ``gateway/`` that differ from ``commit`` (the working tree's uncommitted edits)."""

    def describe(self) -> str:
        edits = f", {len(self.changed)} uncommitted file(s) under gateway/" if self.changed else ""
        return f"`{self.commit[:10]}` ({self.subject}){edits}"


def side(root: Path, commit: str, working_tree: bool) -> Side:
    """``commit`` and, for the working tree (``root`` as it is), its uncommitted changes under gateway/."""
    subject = git(root, "log", "-1", "--format=%s", commit)
    status = git(root, "status", "--porcelain", "--", "gateway", strip=False) if working_tree else ""
    return Side(commit, subject[:100], [line[3:] for line in status.splitlines() if line.strip()])


@contextmanager
def worktree(root: Path, commit: str) -> Iterator[Path]:
    """``commit`` checked out (detached) in a temporary directory, removed on the way out, on an
    error or Ctrl-C too."""
    holder = Path(tempfile.mkdtemp(prefix="bench-against-"))
    path = holder / "tree"
    try:
        git(root, "worktree", "add", "--detach", "--quiet", str(path), commit)
        yield path
    finally:
        try:
            if path.exists():
                git(root, "worktree", "remove", "--force", str(path))
        except GitError:
            pass
        shutil.rmtree(holder, ignore_errors=True)
        try:
            git(root, "worktree", "prune")
        except GitError:
            pass
