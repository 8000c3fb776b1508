"""scripts/ctest_summary.py: per-base and per-suite counts from CTest's LastTest.log."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("ctest_summary", ROOT / "scripts" / "ctest_summary.py")
ctest_summary = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ctest_summary)


def _block(i, name, output, passed=True, seconds=1.5):
    verdict = "Test Passed." if passed else "Test Failed."
    return (
        f"{i}/3 Testing: {name}\n{i}/3 Test: {name}\nCommand: \"python\" \"-m\" \"pytest\"\n"
        f"Directory: /repo\n\"{name}\" start time: Nov 23 13:00 UTC\nOutput:\n"
        f"----------------------------------------------------------\n{output}<end of output>\n"
        f"Test time =   {seconds} sec\n----------------------------------------------------------\n"
        f"{verdict}\n\"{name}\" end time: Nov 23 13:01 UTC\n\n"
    )


LOG = (
    _block(1, "v2.13.0/inductor.test_a", "..s\n2 passed, 1 skipped, 3 warnings in 4.20s\n")
    + _block(2, "v2.15.0/inductor.test_a", "F.\nFAILED x\n1 failed, 1 passed in 2.00s\n", passed=False)
    + _block(3, "wheel_smoke", "[w] a\n3 passed in 1.0s\n[w] b\n1 passed, 1 skipped in 1.0s\n[w] done\n")
)


def test_parse_counts_status_and_time():
    rows = {r["name"]: r for r in ctest_summary.parse(LOG)}
    assert rows["v2.13.0/inductor.test_a"]["counts"] == {"passed": 2, "skipped": 1}
    assert rows["v2.15.0/inductor.test_a"]["status"] == "FAILED"
    assert rows["v2.15.0/inductor.test_a"]["counts"] == {"failed": 1, "passed": 1}
    # several pytest runs in one suite add up
    assert rows["wheel_smoke"]["counts"] == {"passed": 4, "skipped": 1}
    assert rows["v2.13.0/inductor.test_a"]["seconds"] == 1.5


def test_render_groups_by_base_with_totals():
    text = ctest_summary.render(ctest_summary.parse(LOG))
    assert "v2.13.0: 1 suites (0 failed), 2 passed, 0 failed, 1 skipped" in text
    assert "v2.15.0: 1 suites (1 failed), 1 passed, 1 failed" in text
    assert "once: 1 suites (0 failed), 4 passed" in text


def test_missing_log_is_reported_not_fatal(tmp_path, capsys):
    assert ctest_summary.main(["ctest_summary.py", str(tmp_path)]) == 0
    assert "no CTest log" in capsys.readouterr().err


def test_columns_line_up_whatever_the_suite_names_length():
    """Issue 34 item 14: a suite name longer than the old fixed width shifted every column after it."""
    long = "v2.13.0/inductor.test_cat_linear_fused_positional_inplace_between_parts"
    log = LOG + _block(4, long, "3 passed in 1.00s\n") + _block(5, "patchset_check_with_a_really_long_suite_name", "ok\n")
    table = ctest_summary.render(ctest_summary.parse(log)).split("\n\n")[0].splitlines()
    header = table[0]
    # every row is as long as the header, and each count sits under its heading's right edge
    assert len({len(line) for line in table}) == 1, table
    passed_end = header.index("passed") + len("passed")
    row = next(line for line in table if "positional_inplace" in line)
    assert row[:passed_end].rstrip().endswith("3") and row[passed_end] == " "


def test_the_logs_of_several_runs_add_up(tmp_path, capsys):
    """dev.sh test runs ctest once per base and passes each run's log: one table over all of them."""
    first, second = tmp_path / "batch-1.log", tmp_path / "batch-2.log"
    first.write_text(_block(1, "v2.13.0/inductor.test_a", "2 passed in 1.00s\n") + _block(2, "wheel_smoke", "1 passed in 1.0s\n"))
    second.write_text(_block(1, "v2.15.0/inductor.test_a", "1 failed, 1 passed in 2.00s\n", passed=False))
    assert ctest_summary.main(["ctest_summary.py", str(tmp_path), str(first), str(tmp_path / "gone.log"), str(second)]) == 0
    out, err = capsys.readouterr()
    assert "gone.log: no CTest log" in err
    assert "v2.13.0: 1 suites (0 failed), 2 passed" in out and "v2.15.0: 1 suites (1 failed), 1 passed, 1 failed" in out
    assert "once: 1 suites (0 failed), 1 passed" in out
