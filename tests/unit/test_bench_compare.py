"""``bench micro``'s pure logic: paired-round statistics (bench/compare.py), callgrind dumps
(bench/instructions.py), the worker's stream checks and bodies (bench/micro_worker.py) and the
temporary worktree of ``--against`` (bench/against.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench import against, compare, instructions
from bench.micro_worker import FEATURES, LONG_MARK, SHORT_MARK, TOKEN, Answer, Requests, check_stream, script

FEATURE = {f.name: f for f in FEATURES}


# -- compare ---------------------------------------------------------------------------------------


def test_percentile_interpolates_between_ranks() -> None:
    assert compare.percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert compare.percentile([5.0], 0.9) == 5.0
    assert compare.percentile([3.0, 1.0, 2.0], 0.0) == 1.0
    with pytest.raises(ValueError):
        compare.percentile([], 0.5)


def test_the_bootstrap_is_seeded_and_brackets_the_median() -> None:
    values = [0.9, 1.0, 1.1, 1.05, 0.95, 1.02, 0.98, 1.2]
    first = compare.bootstrap_interval(values)
    assert first == compare.bootstrap_interval(values)  # same seed, same interval
    low, high = first
    assert min(values) <= low <= 1.0 <= high <= max(values)


def test_a_consistent_slowdown_is_slower() -> None:
    base = [10.0, 20.0, 15.0, 12.0, 30.0, 11.0]  # the machine's speed moves a lot between rounds
    change = [b * 1.1 for b in base]  # but every round's change is 10 % slower
    result = compare.compare(base, change)
    assert result is not None
    assert result.percent == pytest.approx(10.0)
    assert result.interval == pytest.approx((10.0, 10.0))
    assert result.verdict == compare.SLOWER
    assert result.rounds == 6
    assert result.base == pytest.approx(13.5)


def test_pairing_cancels_what_medians_of_each_side_would_not() -> None:
    # Unpaired, the sides' ranges overlap entirely; paired, every round says 5 % faster.
    base = [40.0, 80.0, 60.0, 100.0, 50.0, 70.0]
    change = [b * 0.95 for b in base]
    result = compare.compare(base, change)
    assert result is not None and result.verdict == compare.FASTER


def test_disagreeing_rounds_are_within_noise() -> None:
    result = compare.compare([10.0] * 6, [9.0, 11.0, 9.5, 10.5, 12.0, 8.0])
    assert result is not None
    low, high = result.interval
    assert low < 0 < high
    assert result.verdict == compare.NOISE


def test_rounds_missing_on_either_side_pair_nothing() -> None:
    assert compare.paired([1.0, None, 3.0], [2.0, 2.0, None]) == [(1.0, 2.0)]
    assert compare.compare([None, None], [1.0, 2.0]) is None
    assert compare.compare([0.0], [1.0]) is None  # no ratio over a zero base


def test_verdict_bounds() -> None:
    assert compare.verdict(1.01, 1.2) == compare.SLOWER
    assert compare.verdict(0.8, 0.99) == compare.FASTER
    assert compare.verdict(0.99, 1.01) == compare.NOISE
    assert compare.verdict(1.0, 1.1) == compare.NOISE  # touching 0 % is not a move


def test_added_is_the_median_of_per_process_differences() -> None:
    assert compare.added([12.0, 25.0, 14.0], [10.0, 20.0, 13.0]) == 2.0
    assert compare.added([12.0, None], [None, 3.0]) is None


def test_theil_sen_ignores_one_wild_point() -> None:
    xs = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    ys = [3.0, 5.0, 7.0, 90.0, 11.0, 13.0]  # y = 2x + 1, but one point thrown off
    line = compare.theil_sen(xs, ys)
    assert line is not None
    slope, intercept = line
    assert slope == pytest.approx(2.0)
    assert intercept == pytest.approx(1.0)
    assert compare.theil_sen([2.0, 2.0], [1.0, 5.0]) is None


def test_cost_at_reads_the_line_at_one_chunk_per_token() -> None:
    # 1,000 µs a stream plus 50 µs a chunk: streams that went out in fewer chunks cost less.
    chunks = [40.0, 200.0, 120.0, 80.0, 190.0]
    costs = [1000 + 50 * c for c in chunks]
    assert compare.cost_at(chunks, costs, 200) == pytest.approx(11_000)
    assert compare.cost_at([200.0, 200.0, 200.0], [5.0, 9.0, 7.0], 200) == 7.0  # no spread: the median
    with pytest.raises(ValueError):
        compare.cost_at([1.0], [], 2)


def test_rounds_to_see_grows_with_the_spread() -> None:
    assert compare.rounds_to_see([1.0, 1.1]) is None  # too few to say
    narrow = compare.rounds_to_see([0.99, 1.0, 1.01, 1.0, 0.995])
    wide = compare.rounds_to_see([0.8, 1.2, 0.9, 1.1, 1.0])
    assert narrow is not None and wide is not None
    assert narrow < wide
    assert narrow >= 2


def test_instruction_changes_inside_the_tolerance_are_noise() -> None:
    assert compare.instruction_change(100.0, 100.5, 0.01) == (pytest.approx(0.5), compare.NOISE)
    assert compare.instruction_change(100.0, 103.0, 0.01) == (pytest.approx(3.0), compare.SLOWER)
    assert compare.instruction_change(100.0, 90.0, 0.01) == (pytest.approx(-10.0), compare.FASTER)


# -- instructions ----------------------------------------------------------------------------------

DUMP = """# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 26124
cmd:  python worker.py
part: 2
thread: 1

desc: Timerange: Basic block 0 - 1640343
desc: Trigger: Client Request: plain|long

positions: line
events: Ir
summary: 9398831

fn=(1) main
0 9398831
"""


def test_a_named_dump_reads_as_its_name_thread_and_count() -> None:
    assert instructions.parse_dump(DUMP) == ("plain|long", 1, 9398831)
    at_exit = DUMP.replace("Client Request: plain|long", "Program termination")
    assert instructions.parse_dump(at_exit) is None


def test_read_dumps_and_per_feature(tmp_path: Path) -> None:
    dumps = {"plain|short": 2_000_000, "plain|long": 2_000_000 + 2 * 39 * 70_000, "stop|short": 5, "stop|long": 9}
    for number, (name, count) in enumerate(dumps.items(), 1):
        text = DUMP.replace("plain|long", name).replace("summary: 9398831", f"summary: {count}")
        (tmp_path / f"{instructions.OUT_PREFIX}.1.{number}-01").write_text(text)
    (tmp_path / f"{instructions.OUT_PREFIX}.1-01").write_text(DUMP.replace("Client Request: plain|long", "x"))
    read = instructions.read_dumps(tmp_path)
    assert read == dumps
    # stop's long batch was not listed by the worker (a wrong answer): no figures for it
    per = instructions.per_feature(read, ["plain|short", "plain|long", "stop|short"], requests=2, tokens=40)
    assert set(per) == {"plain"}
    assert per["plain"].per_token == pytest.approx(70_000)
    assert per["plain"].per_request == pytest.approx(1_000_000)


def test_the_valgrind_command_instruments_nothing_until_asked(tmp_path: Path) -> None:
    command = instructions.valgrind_command(tmp_path)
    assert command[0] == "valgrind"
    assert "--tool=callgrind" in command
    assert "--instr-atstart=no" in command
    assert "--separate-threads=yes" in command
    assert any(part.startswith(f"--callgrind-out-file={tmp_path}/") for part in command)


# -- the worker's streams ------------------------------------------------------------------------


def sse(*chunks: dict[str, object], done: bool = True) -> bytes:
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return body + (b"data: [DONE]\n\n" if done else b"")


def chunk(text: str, field: str = "content", **extra: object) -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": {field: text}, **extra}]}


def answer(body: bytes, status: int = 200) -> Answer:
    return Answer(0.0, 0.0, 0.0, status, body)


def test_a_right_stream_counts_its_chunks() -> None:
    body = sse(chunk(""), chunk(TOKEN * 2), chunk(TOKEN))
    assert check_stream(FEATURE["plain"], answer(body), 3) == 2


def test_reasoning_counts_once_though_said_under_two_names() -> None:
    delta = {"choices": [{"index": 0, "delta": {"reasoning_content": TOKEN, "reasoning": TOKEN}}]}
    assert check_stream(FEATURE["reasoning"], answer(sse(delta, delta)), 2) == 2


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (sse(chunk(TOKEN)), 200),  # one token short
        (sse(chunk(TOKEN * 2), done=False), 200),  # unfinished
        (sse(chunk(TOKEN * 2)), 500),
        (sse(chunk(TOKEN), {"error": {"message": "boom"}}), 200),
        (sse({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}}]}, chunk(TOKEN * 2)), 200),
    ],
)
def test_a_wrong_stream_raises(body: bytes, status: int) -> None:
    with pytest.raises(RuntimeError):
        check_stream(FEATURE["plain"], answer(body, status), 2)


def test_logprobs_must_come_with_every_token() -> None:
    item = {"token": TOKEN, "logprob": -0.1, "top_logprobs": [{"token": TOKEN}, {"token": "tik "}]}
    right = sse(chunk(TOKEN, logprobs={"content": [item]}), chunk(TOKEN, logprobs={"content": [item]}))
    assert check_stream(FEATURE["logprobs"], answer(right), 2) == 2
    with pytest.raises(RuntimeError, match="two alternatives"):
        check_stream(FEATURE["logprobs"], answer(sse(chunk(TOKEN * 2, logprobs=None))), 2)


def test_continuous_usage_must_be_on_every_chunk_and_at_the_end() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 1}
    final = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    right = sse({**chunk(TOKEN), "usage": usage}, {**chunk(TOKEN), "usage": usage}, final)
    assert check_stream(FEATURE["usage"], answer(right), 2) == 2
    with pytest.raises(RuntimeError, match="usage"):
        check_stream(FEATURE["usage"], answer(sse({**chunk(TOKEN), "usage": usage}, chunk(TOKEN), final)), 2)


def test_the_script_answers_one_token_when_the_prompt_says_short() -> None:
    parsed = json.loads(script(5, 0.02))
    assert len(parsed["responses"]) == 5
    assert all(r["delay"] == 0.02 and r["utf8"] == [TOKEN] for r in parsed["responses"])
    (short,) = parsed["after"]
    assert short["seen"] == SHORT_MARK
    assert len(short["responses"]) == 1
    assert "delay" not in json.loads(script(2, 0.0))["responses"][0]


def test_long_and_short_bodies_differ_only_in_what_makes_them_long() -> None:
    requests = Requests("hello", 200, all_scripted=False, delay=0.0)
    long, short = (json.loads(requests.body(FEATURE["stop"], x)) for x in (True, False))
    assert (long["model"], long["max_tokens"], short["max_tokens"]) == ("firehose", 200, 1)
    assert long["stop"] == ["never-matches"] and long["messages"] == short["messages"]
    scripted_long, scripted_short = (json.loads(requests.body(FEATURE["logprobs"], x)) for x in (True, False))
    assert scripted_long["model"] == "scripted" and scripted_long["top_logprobs"] == 2
    long_text = scripted_long["messages"][0]["content"]
    short_text = scripted_short["messages"][0]["content"]
    assert len(long_text) == len(short_text)  # the same prompt size, only the mark differs
    assert long_text.endswith(LONG_MARK) and short_text.endswith(SHORT_MARK)
    everything = Requests("hello", 40, all_scripted=True, delay=0.02)
    assert json.loads(everything.body(FEATURE["plain"], True))["model"] == "scripted"


# -- against ---------------------------------------------------------------------------------------


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "gateway").mkdir(parents=True)
    git(root, "init", "--quiet", "--initial-branch=main")
    git(root, "config", "user.email", "bench@example.invalid")
    git(root, "config", "user.name", "bench")
    for text in ("one", "two"):
        (root / "gateway" / "__init__.py").write_text(text)
        git(root, "add", "-A")
        git(root, "commit", "--quiet", "-m", f"commit {text}")
    return root


def test_on_main_the_default_base_is_head(repository: Path) -> None:
    commit, why = against.default_ref(repository)
    assert commit == git(repository, "rev-parse", "HEAD")
    assert "main" in why and "HEAD itself" in why


def test_on_a_branch_the_default_base_is_where_it_left_main(repository: Path) -> None:
    fork = git(repository, "rev-parse", "HEAD")
    git(repository, "checkout", "--quiet", "-b", "topic")
    (repository / "gateway" / "__init__.py").write_text("three")
    git(repository, "commit", "--quiet", "-am", "on the branch")
    assert against.default_ref(repository)[0] == fork


def test_the_worktree_holds_the_commit_and_goes_away_on_an_error(repository: Path) -> None:
    first = against.resolve(repository, "HEAD~1")
    (repository / "gateway" / "__init__.py").write_text("uncommitted")
    seen = None
    with pytest.raises(KeyboardInterrupt), against.worktree(repository, first) as tree:
        seen = tree
        assert (tree / "gateway" / "__init__.py").read_text() == "one"
        raise KeyboardInterrupt
    assert seen is not None and not seen.exists()
    assert str(seen) not in git(repository, "worktree", "list")
    side = against.side(repository, git(repository, "rev-parse", "HEAD"), working_tree=True)
    assert side.changed == ["gateway/__init__.py"]
    assert against.side(repository, first, working_tree=False).changed == []


def test_a_ref_that_names_nothing_is_an_error(repository: Path) -> None:
    with pytest.raises(against.GitError):
        against.resolve(repository, "no-such-ref")
