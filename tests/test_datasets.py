"""Local dataset loaders: every reader, every format, every bad-row reason, the paper split."""
from __future__ import annotations

import json
import sys

import pytest

from rolecall.tasks.files import DatasetError, LoadReport, RowIssue, load_dataset, read_rows, split_indices
from rolecall.rewards.code import CodeTests

pa = pytest.importorskip("pyarrow")
import pyarrow.ipc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

ROWS = [{"id": 1, "prompt": "What is 1+1?", "solution": "2"},
        {"id": 2, "prompt": "What is 2+2?", "solution": "4"},
        {"id": 3, "prompt": "What is 3+3?", "solution": "6"}]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_parquet(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_arrow_dir(d, shards):
    """What `Dataset.save_to_disk` writes: Arrow IPC stream shards listed in state.json."""
    d.mkdir(parents=True)
    names = []
    for i, rows in enumerate(shards):
        name = f"data-{i:05d}-of-{len(shards):05d}.arrow"
        table = pa.Table.from_pylist(rows)
        with pa.OSFile(str(d / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        names.append(name)
    (d / "state.json").write_text(json.dumps({"_data_files": [{"filename": n} for n in names], "_split": None}))
    (d / "dataset_info.json").write_text("{}")
    return d


def load_rows(tmp_path, fmt, rows, **kw):
    return load_dataset(write_jsonl(tmp_path / "train.jsonl", rows), fmt, **kw)


def triples(issues):
    return [(i.index, i.field, i.reason) for i in issues]


# --- readers ------------------------------------------------------------------------------

def test_parquet_file(tmp_path):
    assert read_rows(write_parquet(tmp_path / "x.parquet", ROWS)) == ROWS


def test_jsonl_skips_blank_lines_and_names_a_bad_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps(ROWS[0]) + "\n\n" + json.dumps(ROWS[1]) + "\n")
    assert read_rows(p) == ROWS[:2]
    p.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps(ROWS[1]) + "\n{\"id\": 3, oops\n")
    with pytest.raises(DatasetError, match=r"x\.jsonl:3: line 3 is not valid JSON"):
        read_rows(p)
    p.write_text(json.dumps(ROWS[0]) + "\n[1, 2]\n")
    with pytest.raises(DatasetError, match="line 2 must be a JSON object, got list"):
        read_rows(p)


def test_json_list_columns_and_json_lines(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps(ROWS))
    assert read_rows(p) == ROWS
    p.write_text(json.dumps({k: [r[k] for r in ROWS] for k in ROWS[0]}))
    assert read_rows(p) == ROWS
    # Dataset.to_json("x.json") writes JSON lines despite the suffix
    p.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert read_rows(p) == ROWS
    p.write_text(json.dumps({"id": [1, 2], "prompt": ["a"]}))
    with pytest.raises(DatasetError, match="different lengths"):
        read_rows(p)
    p.write_text(json.dumps({"version": "1.1", "data": []}))
    with pytest.raises(DatasetError, match=r"\['version'\] are not lists"):
        read_rows(p)


def test_save_to_disk_arrow_dir_reads_shards_in_state_order(tmp_path):
    d = write_arrow_dir(tmp_path / "ds", [ROWS[:2], ROWS[2:]])
    assert read_rows(d) == ROWS


def test_dataset_dict_dir_picks_the_source_split(tmp_path):
    d = tmp_path / "dd"
    write_arrow_dir(d / "train", [ROWS[:2]])
    write_arrow_dir(d / "test", [ROWS[2:]])
    (d / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    assert read_rows(d) == ROWS[:2]
    assert read_rows(d, split="test") == ROWS[2:]
    with pytest.raises(DatasetError, match=r"no split 'validation'; this DatasetDict has \['train', 'test'\]"):
        read_rows(d, split="validation")
    assert [p.uid for p in load_dataset(d, "dapo_math", source_split="test").problems] == ["3"]


def test_hub_parquet_dir_picks_files_of_the_split(tmp_path):
    d = tmp_path / "snap"
    write_parquet(d / "data" / "train-00000-of-00002.parquet", ROWS[:1])
    write_parquet(d / "data" / "train-00001-of-00002.parquet", ROWS[1:2])
    write_parquet(d / "data" / "test-00000-of-00001.parquet", ROWS[2:])
    write_parquet(d / "data" / "train_sft-00000-of-00001.parquet", [{"id": 9, "prompt": "x", "solution": "y"}])
    write_parquet(d / ".cache" / "huggingface" / "train-00000.parquet", [{"id": 8}])
    assert read_rows(d) == ROWS[:2]
    assert read_rows(d, split="test") == ROWS[2:]
    with pytest.raises(DatasetError, match="no parquet file of split 'validation'"):
        read_rows(d, split="validation")


def test_hub_parquet_dir_with_split_subdirectories_and_several_configs(tmp_path):
    d = tmp_path / "snap"
    write_parquet(d / "en" / "train" / "0000.parquet", ROWS)
    assert read_rows(d / "en") == ROWS
    write_parquet(d / "cn" / "train" / "0000.parquet", ROWS)
    with pytest.raises(DatasetError, match=r"several directories \['cn/train', 'en/train'\]"):
        read_rows(d)


@pytest.mark.parametrize("make, why", [
    (lambda t: t / "missing.jsonl", "no such file or directory"),
    (lambda t: (t / "x.csv").write_text("a,b\n") and t / "x.csv", "unknown file type '.csv'"),
    (lambda t: (t / "x.jsonl").write_text("\n\n") and t / "x.jsonl", "it holds no rows"),
    (lambda t: (t / "empty").mkdir() or t / "empty", "no dataset_dict.json, no state.json and no .parquet"),
])
def test_unusable_paths_name_the_path_and_the_accepted_forms(tmp_path, make, why):
    p = make(tmp_path)
    with pytest.raises(DatasetError) as e:
        read_rows(p)
    assert str(p) in str(e.value) and why in str(e.value)
    assert "a .parquet file" in str(e.value) and "save_to_disk" in str(e.value)


def test_missing_pyarrow_names_the_install_command(tmp_path, monkeypatch):
    p = write_parquet(tmp_path / "x.parquet", ROWS)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=r"pip install .rolecall\[data\]. \(or pip install pyarrow\)"):
        read_rows(p)


def test_readers_agree_with_datasets_itself(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{"id": i, "prompt": [{"role": "user", "content": f"q{i}"}], "solution": str(i)} for i in range(7)]
    ds = datasets.Dataset.from_list(rows)
    ds.save_to_disk(str(tmp_path / "one"))
    ds.train_test_split(test_size=0.3, seed=0).save_to_disk(str(tmp_path / "dd"))
    ds.to_parquet(str(tmp_path / "x.parquet"))
    ds.to_json(str(tmp_path / "x.json"))
    assert read_rows(tmp_path / "one") == rows
    for name in ("x.parquet", "x.json"):
        assert read_rows(tmp_path / name) == rows
    dd = datasets.load_from_disk(str(tmp_path / "dd"))
    assert read_rows(tmp_path / "dd", split="test") == dd["test"].to_list()
    assert [p.prompt for p in load_dataset(tmp_path / "one", "dapo_math").problems] == [f"q{i}" for i in range(7)]


# --- formats: good rows -------------------------------------------------------------------

def test_dapo_math_string_and_chat_prompts(tmp_path):
    rows = [{"prompt": "Compute 2+3.", "solution": "5"},
            {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Compute 7*6."}],
             "solution": 42}]
    ds = load_rows(tmp_path, "dapo_math", rows)
    assert [(p.uid, p.prompt, p.answer, p.meta) for p in ds.problems] == [
        ("dapo_math-0", "Compute 2+3.", "5", {"kind": "math"}),
        ("dapo_math-1", "Compute 7*6.", "42", {"kind": "math"})]
    assert ds.report.summary() == "dapo_math train.jsonl: 2 rows, 2 kept, 0 skipped"
    assert ds.report.details() == "no bad rows"


def test_gsm8k_gold_after_hashes_without_thousands_commas(tmp_path):
    rows = [{"question": "How many?", "answer": "48/2 = 24\n#### 1,234"},
            {"question": "And now?", "answer": "so\n#### 72"},
            {"question": "Big?", "answer": "#### 1,234,567.5"}]
    ds = load_rows(tmp_path, "gsm8k", rows)
    assert [p.answer for p in ds.problems] == ["1234", "72", "1234567.5"]
    assert ds.problems[0].meta == {"kind": "math", "solution": "48/2 = 24\n#### 1,234"}


def test_qa_answers_list_string_and_squad_dict(tmp_path):
    rows = [{"_id": "a1", "question": "Who?", "answers": ["Ada Lovelace", "Ada"]},
            {"_id": "a2", "question": "When?", "answer": "1843"},
            {"_id": "a3", "question": "Where?", "answers": {"text": ["London"], "answer_start": [3]}}]
    ds = load_rows(tmp_path, "qa", rows)
    assert [(p.uid, p.answer, p.meta["answers"]) for p in ds.problems] == [
        ("a1", "Ada Lovelace", ["Ada Lovelace", "Ada"]), ("a2", "1843", ["1843"]), ("a3", "London", ["London"])]
    assert ds.problems[0].meta["kind"] == "qa"


STDIN_LIST = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin_stdout"}]
FUNC_LIST = [{"input": "[1, 2]\n3", "output": "6", "testtype": "functional"}]


@pytest.mark.parametrize("tests, metadata, kind, fn_name, first_input", [
    (json.dumps(STDIN_LIST), None, "stdin", None, "1 2\n"),                           # list form, JSON string
    (STDIN_LIST, None, "stdin", None, "1 2\n"),                                       # list form, decoded
    (json.dumps(FUNC_LIST), {"func_name": "add3"}, "functional", "add3", [[1, 2], 3]),
    (FUNC_LIST, json.dumps({"func_name": "add3"}), "functional", "add3", [[1, 2], 3]),  # metadata as JSON text
    (json.dumps({"inputs": ["5\n"], "outputs": ["25\n"]}), None, "stdin", None, "5\n"),  # columns form
    ({"inputs": [[2, 3]], "outputs": [5], "fn_name": "add"}, None, "functional", "add", [2, 3]),
])
def test_deepcoder_both_test_forms(tmp_path, tests, metadata, kind, fn_name, first_input):
    row = {"problem": "Solve it.", "tests": tests, "starter_code": "def f():\n    pass\n"}
    if metadata is not None:
        row["metadata"] = metadata
    [p] = load_rows(tmp_path, "deepcoder", [row]).problems
    # The starter code is shown to the roles as part of the prompt.
    assert p.prompt == "Solve it.\n\nStarter code:\n```python\ndef f():\n    pass\n```"
    assert (p.answer, p.meta["kind"]) == ("", "code")
    assert p.meta["starter_code"] == row["starter_code"]
    t = p.meta["tests"]
    assert isinstance(t, CodeTests) and (t.kind, t.fn_name, t.inputs[0]) == (kind, fn_name, first_input)


# LiveCodeBench / DeepCoder lcbv5: the function name sits in each test's metadata.
LCB_TESTS = [{"input": "[2,7,11,15]\n9", "output": "[0, 1]", "testtype": "functional",
              "metadata": {"func_name": "twoSum"}},
             {"input": "[3,2,4]\n6", "output": "[1, 2]", "testtype": "functional",
              "metadata": {"func_name": "twoSum"}}]
LCB_STARTER = "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        "


@pytest.mark.parametrize("tests, metadata", [
    (json.dumps(LCB_TESTS), None),                                                    # lcbv5 row
    ([dict(t, metadata=json.dumps(t["metadata"])) for t in LCB_TESTS], None),        # metadata as JSON text
    (json.dumps(LCB_TESTS), json.dumps({"func_name": "twoSum"})),                     # the row agrees
    (json.dumps(LCB_TESTS), "{}"),
    ([dict(t, metadata={}, func_name="twoSum") for t in LCB_TESTS], None),           # func_name key
], ids=["per-test-metadata", "metadata-json-text", "row-agrees", "row-empty", "func_name-key"])
def test_deepcoder_function_name_in_each_tests_metadata(tmp_path, tests, metadata):
    row = {"problem": "Two sum.", "tests": tests, "starter_code": LCB_STARTER}
    if metadata is not None:
        row["metadata"] = metadata
    [p] = load_rows(tmp_path, "deepcoder", [row]).problems
    t = p.meta["tests"]
    assert (t.kind, t.fn_name) == ("functional", "twoSum")
    assert (t.inputs, t.outputs) == (([[2, 7, 11, 15], 9], [[3, 2, 4], 6]), ([0, 1], [1, 2]))


TWO_SUM_OK = """```python
from typing import List

class Solution:
    def twoSum(self, nums: List[int], target: int) -> List[int]:
        seen = {}
        for i, x in enumerate(nums):
            if target - x in seen:
                return [seen[target - x], i]
            seen[x] = i
```"""
TWO_SUM_WRONG = TWO_SUM_OK.replace("return [seen[target - x], i]", "return [i, seen[target - x]]")


def test_lcb_row_with_per_test_function_names_grades_a_leetcode_class(tmp_path, isolated_sandbox):
    """End to end: an lcbv5 row loads, and the code verifier calls Solution().twoSum on it."""
    from rolecall.rewards.verifier import CodeVerifier

    [p] = load_rows(tmp_path, "deepcoder", [{"problem": "Two sum.", "tests": json.dumps(LCB_TESTS),
                                             "starter_code": LCB_STARTER}]).problems
    v = CodeVerifier(timeout_s=2, workers=2)
    try:
        right, wrong = v.score_many([TWO_SUM_OK, TWO_SUM_WRONG], [p, p])
    finally:
        v.close()
    assert (right.value, right.status, right.info["passed"]) == (1.0, "ok", 2), right
    assert (wrong.value, wrong.status) == (0.0, "wrong"), wrong


@pytest.mark.parametrize("tests", [
    {"inputs": [[2, 3]], "outputs": [5], "func_name": "add"},
    {"inputs": [[2, 3]], "outputs": [5], "metadata": {"func_name": "add"}},
    {"inputs": ["[2, 3]"], "outputs": [5], "metadata": json.dumps({"func_name": "add"})},
], ids=["func_name", "metadata", "metadata-json-text"])
def test_deepcoder_columns_form_names_the_function_like_the_list_form(tmp_path, tests):
    [p] = load_rows(tmp_path, "deepcoder", [{"problem": "Add.", "tests": tests}]).problems
    t = p.meta["tests"]
    assert (t.kind, t.fn_name, t.inputs, t.outputs) == ("functional", "add", ([2, 3],), (5,))


def test_deepcoder_from_parquet_with_null_starter_code(tmp_path):
    rows = [{"problem_id": 17, "problem": "P", "tests": json.dumps(STDIN_LIST), "starter_code": None,
             "metadata": None}]
    [p] = load_dataset(write_parquet(tmp_path / "x.parquet", rows), "deepcoder").problems
    assert (p.uid, p.meta["starter_code"]) == ("17", "")


# --- bad rows -----------------------------------------------------------------------------

GOOD_CODE = {"problem": "P", "tests": json.dumps(STDIN_LIST)}

BAD_CASES = {
    "malformed test JSON": ("deepcoder", [GOOD_CODE, {"problem": "P", "tests": "[{\"input\": "}],
                            [(1, "tests", "malformed test JSON")], "tests are not valid JSON"),
    "functional without func_name": ("deepcoder", [GOOD_CODE, {"problem": "P", "tests": json.dumps(FUNC_LIST)}],
                                     [(1, "tests", "malformed test JSON")], "need a function name"),
    "tests name two functions": ("deepcoder", [GOOD_CODE, {"problem": "P", "tests": json.dumps(
        [LCB_TESTS[0], dict(LCB_TESTS[1], metadata={"func_name": "two_sum"})])}],
                                 [(1, "tests", "malformed test JSON")],
                                 "tests name different functions: ['twoSum', 'two_sum']"),
    "tests and row name different functions": ("deepcoder", [GOOD_CODE, {
        "problem": "P", "tests": json.dumps(LCB_TESTS), "metadata": {"func_name": "two_sum"}}],
                                               [(1, "tests", "malformed test JSON")],
                                               "the tests call 'twoSum' but the row's metadata.func_name is 'two_sum'"),
    "test metadata not JSON": ("deepcoder", [GOOD_CODE, {"problem": "P", "tests": json.dumps(
        [dict(LCB_TESTS[0], metadata="{oops")])}], [(1, "tests", "malformed test JSON")],
                               "test 0 metadata: not valid JSON"),
    "missing field": ("deepcoder", [GOOD_CODE, {"tests": json.dumps(STDIN_LIST)}, {"problem": "P", "tests": None}],
                      [(1, "problem", "missing field"), (2, "tests", "missing field")], "row has no 'problem'"),
    "bad metadata": ("deepcoder", [GOOD_CODE, dict(GOOD_CODE, metadata="{oops")],
                     [(1, "metadata", "bad value")], "not valid JSON"),
    "gsm8k gold": ("gsm8k", [{"question": "q", "answer": "#### 3"}, {"question": "q", "answer": "it is 3"},
                             {"question": "q", "answer": "so\n####  "}],
                   [(1, "answer", "unparseable gold answer"), (2, "answer", "unparseable gold answer")],
                   "no '#### <answer>' line"),
    "dapo gold": ("dapo_math", [{"prompt": "p", "solution": "1"}, {"prompt": "p", "solution": "  "},
                                {"prompt": [{"role": "assistant", "content": "hi"}], "solution": "1"}],
                  [(1, "solution", "unparseable gold answer"), (2, "prompt", "bad value")], "empty answer"),
    "qa gold": ("qa", [{"question": "q", "answers": ["a"]}, {"question": "q", "answers": []},
                       {"question": "q", "answer": ""}, {"question": "q"}],
                [(1, "answers", "unparseable gold answer"), (2, "answer", "unparseable gold answer"),
                 (3, "answer", "missing field")], "no non-empty gold answer"),
    "duplicate ids": ("gsm8k", [{"id": 7, "question": "q", "answer": "#### 1"}, {"id": "7", "question": "r",
                                "answer": "#### 2"}, {"id": 8, "question": "s", "answer": "#### 3"},
                                {"id": 7, "question": "t", "answer": "#### 4"}],
                      [(1, "id", "duplicate id"), (3, "id", "duplicate id")], "'7' first seen at row 0"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_rows_error_policy_names_row_field_and_reason(tmp_path, case):
    fmt, rows, expected, detail = BAD_CASES[case]
    with pytest.raises(DatasetError) as e:
        load_rows(tmp_path, fmt, rows)
    msg = str(e.value)
    assert isinstance(e.value, ValueError)
    assert str(tmp_path / "train.jsonl") in msg
    assert f"{len(expected)} bad row{'s' * (len(expected) > 1)} of {len(rows)}" in msg
    index, field, reason = expected[0]
    assert f"row {index}, field {field!r}: {reason}" in msg and detail in msg
    assert triples(e.value.report.issues) == expected


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_rows_skip_policy_drops_and_counts_them(tmp_path, case):
    fmt, rows, expected, _ = BAD_CASES[case]
    ds = load_rows(tmp_path, fmt, rows, on_bad_row="skip")
    r = ds.report
    assert (r.n_rows, r.n_kept, r.n_skipped) == (len(rows), len(rows) - len(expected), len(expected))
    assert triples(r.issues) == expected
    assert len(ds.problems) == r.n_kept
    bad = {i for i, _, _ in expected}
    assert [p.uid for p in ds.problems] == [str(rows[i]["id"]) if "id" in rows[i] else f"{fmt}-{i}"
                                            for i in range(len(rows)) if i not in bad]


def test_over_long_prompt_by_chars_and_by_tokens(tmp_path):
    rows = [{"question": "short one", "answer": "#### 1"}, {"question": "x" * 50, "answer": "#### 2"},
            {"question": "a b c d e f", "answer": "#### 3"}]
    ds = load_rows(tmp_path, "gsm8k", rows, on_bad_row="skip", max_prompt_chars=20)
    assert triples(ds.report.issues) == [(1, "question", "over-long prompt")]
    assert ds.report.issues[0].detail == "50 chars > max_prompt_chars 20"
    too_long = r"row 2, field 'question': over-long prompt \(6 tokens > max_prompt_tokens 5\)"
    with pytest.raises(DatasetError, match=too_long):
        load_rows(tmp_path, "gsm8k", rows, count_tokens=lambda s: len(s.split()), max_prompt_tokens=5)


def test_report_summary_counts_and_details(tmp_path):
    rows = [{"id": i, "question": f"q{i}", "answer": f"#### {i}"} for i in range(5)]
    rows[1]["answer"] = "no hashes"
    rows[3]["answer"] = "####"
    rows[4]["id"] = 0
    r = load_rows(tmp_path, "gsm8k", rows, on_bad_row="skip").report
    assert r.summary() == "gsm8k train.jsonl: 5 rows, 2 kept, 3 skipped (2 unparseable gold answer, 1 duplicate id)"
    assert r.counts == {"unparseable gold answer": 2, "duplicate id": 1}
    assert r.details(max_rows=2).splitlines() == [
        "row 1, field 'answer': unparseable gold answer (no '#### <answer>' line)",
        "row 3, field 'answer': unparseable gold answer (nothing after '####')",
        "... and 1 more"]


def test_all_rows_bad_is_an_error_even_when_skipping(tmp_path):
    with pytest.raises(DatasetError, match="no usable rows"):
        load_rows(tmp_path, "gsm8k", [{"question": "q", "answer": "x"}], on_bad_row="skip")


def test_bad_arguments_fail_before_reading(tmp_path):
    p = tmp_path / "never-read.jsonl"
    for kw, match in [(dict(fmt="csv"), "unknown dataset format 'csv'"),
                      (dict(test_fraction=1.0), r"test_fraction must be in \[0, 1\)"),
                      (dict(split="test"), "needs test_fraction > 0"),
                      (dict(on_bad_row="ignore"), "on_bad_row must be"),
                      (dict(limit=0), "limit must be a positive integer"),
                      (dict(max_prompt_tokens=10), "must be given together"),
                      (dict(max_prompt_chars=-1), "max_prompt_chars must be a positive integer")]:
        kw = {"fmt": "gsm8k", **kw}
        with pytest.raises(ValueError, match=match):
            load_dataset(p, **kw)


# --- split --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dapo_like(tmp_path_factory):
    """A 14,116-row file: the size of DAPO-Math-17k's English set."""
    rows = [{"prompt": f"Problem {i}", "solution": str(i)} for i in range(14116)]
    return write_jsonl(tmp_path_factory.mktemp("dapo") / "en.jsonl", rows), rows


def test_paper_split_sizes_disjoint_and_deterministic(dapo_like):
    path, _ = dapo_like
    test = load_dataset(path, "dapo_math", split="test", test_fraction=0.1)
    train = load_dataset(path, "dapo_math", split="train", test_fraction=0.1)
    assert (len(test.problems), len(train.problems)) == (1412, 12704)
    test_ids, train_ids = [p.uid for p in test.problems], [p.uid for p in train.problems]
    assert not set(test_ids) & set(train_ids) and len(set(test_ids) | set(train_ids)) == 14116
    assert test_ids == [p.uid for p in load_dataset(path, "dapo_math", split="test", test_fraction=0.1).problems]
    other = load_dataset(path, "dapo_math", split="test", test_fraction=0.1, split_seed=7).problems
    assert [p.uid for p in other] != test_ids
    assert test.report.summary() == ("dapo_math en.jsonl: 14116 rows, 14116 kept, 0 skipped; "
                                     "test split 1412 problems (test_fraction 0.1: 10 % of rows held out "
                                     "with seed 42, the paper's math split)")


def test_paper_split_equals_datasets_train_test_split(dapo_like):
    datasets = pytest.importorskip("datasets")
    path, rows = dapo_like
    ref = datasets.Dataset.from_list(rows).train_test_split(test_size=0.1, seed=42)
    for split in ("train", "test"):
        mine = load_dataset(path, "dapo_math", split=split, test_fraction=0.1).problems
        assert [p.prompt for p in mine] == ref[split]["prompt"]
    for n, frac, seed in [(10, 0.25, 0), (101, 0.1, 42), (3, 0.5, 1)]:
        ref = datasets.Dataset.from_dict({"i": list(range(n))}).train_test_split(test_size=frac, seed=seed)
        assert split_indices(n, frac, seed) == (ref["train"]["i"], ref["test"]["i"])


def test_all_ignores_test_fraction_and_zero_fraction_keeps_file_order(tmp_path):
    rows = [{"prompt": f"p{i}", "solution": str(i)} for i in range(10)]
    all_ = load_rows(tmp_path, "dapo_math", rows, split="all", test_fraction=0.5).problems
    train = load_rows(tmp_path, "dapo_math", rows, split="train").problems
    assert [p.prompt for p in all_] == [p.prompt for p in train] == [r["prompt"] for r in rows]


def test_split_runs_over_kept_rows_and_limit_applies_last(tmp_path):
    rows = [{"prompt": f"p{i}", "solution": "" if i in (3, 8) else str(i)} for i in range(20)]
    ds = load_rows(tmp_path, "dapo_math", rows, split="test", test_fraction=0.2, on_bad_row="skip")
    kept = [f"p{i}" for i in range(20) if i not in (3, 8)]
    _, test_idx = split_indices(18, 0.2, 42)
    assert [p.prompt for p in ds.problems] == [kept[i] for i in test_idx]
    assert len(ds.problems) == 4  # ceil(0.2 * 18)
    limited = load_rows(tmp_path, "dapo_math", rows, split="test", test_fraction=0.2, on_bad_row="skip", limit=2)
    assert limited.problems == ds.problems[:2] and limited.report.n_returned == 2


def test_report_types_are_exported():
    r = LoadReport("x.jsonl", "qa", 3, [RowIssue(2, "answers", "unparseable gold answer", "no non-empty gold answer")])
    assert (r.n_kept, r.n_skipped) == (2, 1)
    assert str(r.issues[0]) == "row 2, field 'answers': unparseable gold answer (no non-empty gold answer)"


def test_deepcoder_primeintellect_function_call_tests(tmp_path):
    """PrimeIntellect rows carry `type: function_call` and a per-test fn_name."""
    tests = [{"type": "function_call", "fn_name": "add", "input": [1, 2], "output": [3]},
             {"type": "function_call", "fn_name": "add", "input": [5, 5], "output": [10]}]
    f = tmp_path / "pi.jsonl"
    f.write_text(json.dumps({"problem": "Add.", "tests": json.dumps(tests)}) + "\n")
    p = load_dataset(f, "deepcoder").problems[0]
    t = p.meta["tests"]
    assert (t.kind, t.fn_name, t.inputs, t.outputs) == ("functional", "add", ([1, 2], [5, 5]), ([3], [10]))


def test_dapo_math_unprocessed_reward_model_form(tmp_path):
    f = tmp_path / "dapo.jsonl"
    f.write_text(json.dumps({"prompt": [{"role": "user", "content": "Q?"}],
                             "reward_model": {"ground_truth": "34", "style": "rule"}}) + "\n")
    p = load_dataset(f, "dapo_math").problems[0]
    assert (p.prompt, p.answer) == ("Q?", "34")


# --- test_rows: a held-out split by count (the paper's code split) ---------------------------

@pytest.fixture(scope="module")
def deepcoder_like(tmp_path_factory):
    """3,000 code rows with ids: enough for the paper's 1,000-row code validation split."""
    tests = json.dumps([{"input": "1\n", "output": "1\n", "testtype": "stdin"}])
    rows = [{"id": i, "problem": f"Echo n ({i}).", "tests": tests} for i in range(3000)]
    return write_jsonl(tmp_path_factory.mktemp("deepcoder") / "code.jsonl", rows), rows


def test_test_rows_holds_out_exactly_n_disjoint_and_covering(deepcoder_like):
    path, _ = deepcoder_like
    test = load_dataset(path, "deepcoder", split="test", test_rows=1000)
    train = load_dataset(path, "deepcoder", split="train", test_rows=1000)
    assert (len(test.problems), len(train.problems)) == (1000, 2000)
    test_ids, train_ids = [p.uid for p in test.problems], [p.uid for p in train.problems]
    assert not set(test_ids) & set(train_ids)
    assert set(test_ids) | set(train_ids) == {p.uid for p in load_dataset(path, "deepcoder").problems}
    # test_rows replaces test_fraction: the fraction has no effect once test_rows is given
    assert [p.uid for p in load_dataset(path, "deepcoder", split="test", test_rows=1000,
                                        test_fraction=0.3).problems] == test_ids
    assert [p.uid for p in load_dataset(path, "deepcoder", split="test", test_rows=1000,
                                        split_seed=7).problems] != test_ids
    assert test.report.summary() == (
        "deepcoder code.jsonl: 3000 rows, 3000 kept, 0 skipped; test split 1000 problems "
        "(test_rows 1000: the first 1000 rows of a seed-42 shuffle held out, the paper's code split)")


def test_test_rows_equals_datasets_train_test_split_and_shuffle(deepcoder_like):
    datasets = pytest.importorskip("datasets")
    path, rows = deepcoder_like
    ds = datasets.Dataset.from_list(rows)
    ref = ds.train_test_split(test_size=1000, seed=42)
    for split in ("train", "test"):
        mine = load_dataset(path, "deepcoder", split=split, test_rows=1000).problems
        assert [p.uid for p in mine] == [str(i) for i in ref[split]["id"]]
        assert [p.prompt for p in mine] == ref[split]["problem"]
    # "shuffle with seed 42, the first 1,000 rows are validation" picks the same rows
    assert ds.shuffle(seed=42).select(range(1000))["id"] == ref["test"]["id"]
    assert split_indices(3000, 0.1, 42, test_rows=1000) == (ref["train"]["id"], ref["test"]["id"])  # id == row
    for n, k, seed in [(10, 3, 0), (101, 100, 42), (2, 1, 1)]:
        ref = datasets.Dataset.from_dict({"i": list(range(n))}).train_test_split(test_size=k, seed=seed)
        assert split_indices(n, 0.0, seed, test_rows=k) == (ref["train"]["i"], ref["test"]["i"])


def test_test_rows_runs_over_kept_rows(tmp_path):
    rows = [{"prompt": f"p{i}", "solution": "" if i in (3, 8) else str(i)} for i in range(20)]
    ds = load_rows(tmp_path, "dapo_math", rows, split="test", test_rows=5, on_bad_row="skip")
    kept = [f"p{i}" for i in range(20) if i not in (3, 8)]
    _, test_idx = split_indices(18, 0.0, 42, test_rows=5)
    assert [p.prompt for p in ds.problems] == [kept[i] for i in test_idx] and len(ds.problems) == 5


def test_test_rows_not_below_rows_kept_is_an_error_naming_both(tmp_path):
    rows = [{"prompt": f"p{i}", "solution": str(i)} for i in range(10)]
    for k in (10, 1000):
        with pytest.raises(DatasetError, match=rf"test_rows {k} must be less than the 10 rows kept"):
            load_rows(tmp_path, "dapo_math", rows, split="train", test_rows=k)
    with pytest.raises(ValueError, match="test_rows 10 must be less than the 10 rows kept"):
        split_indices(10, 0.0, 42, test_rows=10)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="test_rows must be a positive integer"):
            load_dataset(tmp_path / "never-read.jsonl", "dapo_math", split="test", test_rows=bad)
    # split="test" with test_rows needs no test_fraction
    assert len(load_rows(tmp_path, "dapo_math", rows, split="test", test_rows=3).problems) == 3


def test_describe_split_names_the_paper_splits():
    from rolecall.tasks.files import describe_split
    assert describe_split(0.1, 42) == "test_fraction 0.1: 10 % of rows held out with seed 42, the paper's math split"
    assert describe_split(0.1, 42, 1000) == ("test_rows 1000: the first 1000 rows of a seed-42 shuffle held out, "
                                             "the paper's code split")
    assert describe_split(0.2, 7) == "test_fraction 0.2: 20 % of rows held out with seed 7"
    assert describe_split(0.1, 7, 1000) == "test_rows 1000: the first 1000 rows of a seed-7 shuffle held out"


def test_config_test_rows_values_and_the_dataset_split(tmp_path):
    from rolecall.config import ConfigError, load_config
    from rolecall.tasks.dataset import load_dataset_problems

    base = ["task.name=dataset", "data.format=deepcoder", "reward.name=code"]
    for bad in ("0", "-5", "2.5", "true", "many"):
        with pytest.raises(ConfigError) as e:
            load_config(None, [*base, "data.path=rows.jsonl", f"data.test_rows={bad}"])
        assert any(line.strip().startswith("data.test_rows:") for line in str(e.value).splitlines()), str(e.value)
    assert load_config(None, [*base, "data.path=rows.jsonl"]).data.test_rows is None
    # test_rows replaces test_fraction, so test_fraction 0 is fine with it
    cfg = load_config(None, [*base, "data.path=rows.jsonl", "data.test_rows=1000", "data.test_fraction=0"])
    assert (cfg.data.test_rows, cfg.data.test_fraction) == (1000, 0)

    tests = json.dumps([{"input": "1\n", "output": "1\n", "testtype": "stdin"}])
    rows = write_jsonl(tmp_path / "code.jsonl", [{"id": i, "problem": f"p{i}", "tests": tests} for i in range(30)])
    cfg = load_config(None, [*base, f"data.path={rows}", "data.test_rows=12"])
    lines = []
    train_P, val_P = load_dataset_problems(cfg.data, log=lines.append)
    assert (len(train_P), len(val_P)) == (18, 12) and not {p.uid for p in train_P} & {p.uid for p in val_P}
    _, val_idx = split_indices(30, 0.0, 42, test_rows=12)
    assert [p.prompt for p in val_P] == [f"p{i}" for i in val_idx]
    assert lines[-1] == ("validation: test_rows 12: the first 12 rows of a seed-42 shuffle held out "
                         "(12 validation, 18 train problems)")
    cfg = load_config(None, [*base, f"data.path={rows}", "data.test_rows=30"])
    with pytest.raises(ValueError, match=r"data\.test_rows: 30 must be less than the 30 rows kept"):
        load_dataset_problems(cfg.data, log=lambda line: None)
