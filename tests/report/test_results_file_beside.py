"""`kvconform report` encodes results.json.gz in a forked child beside the rendering: the same bytes, and the
encoding in the command's own process when the child fails."""

import gzip
import json
import os

import pytest

from harness.commands import report
from harness.report import encode_results_file
from harness.results_model import ResultsDocument, make_entry


def _document() -> ResultsDocument:
    entries = [make_entry(nodeid=f"suites/x.py::test_{i}", suite="allocator", status="passed", cell={"case": i})
               for i in range(50)]
    return ResultsDocument(run_info={"kvconform_version": "0.1.0"}, results=entries)


def test_the_child_encodes_the_same_bytes():
    document = _document()
    encoded = report._encoded_beside(document)()
    assert encoded == encode_results_file(document)
    assert len(json.loads(gzip.decompress(encoded))["results"]) == 50


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here: the results file is encoded in-process")
def test_a_failing_child_leaves_the_encoding_to_the_command(monkeypatch):
    document, parent = _document(), os.getpid()

    def fails_in_the_child(results):
        if os.getpid() != parent:
            raise MemoryError("the child ran out")
        return encode_results_file(results)

    monkeypatch.setattr(report, "encode_results_file", fails_in_the_child)
    assert report._encoded_beside(document)() == encode_results_file(document)
