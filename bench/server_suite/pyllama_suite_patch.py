"""pytest plugin for llama.cpp's server test suite (tools/server/tests): the model substitution
of bench/llama_server_suite.sh. Loaded with `-p pyllama_suite_patch`; the suite's files are not
edited. Every preset that downloads a model (-hf/-hff/-mu) gets the local GGUF in
$SUITE_MODEL instead, and the session-start download of every preset (ServerPreset.load_all) is
skipped. The server executable is the suite's own choice: $LLAMA_SERVER_BIN_PATH.

With SUITE_DEDUP=1 the tests that differ only in the model they would download (a parameter
named hf_repo, model_hf_repo or model_file) run once: after the substitution they send the
same requests to the same server. The first of each group runs; the others are deselected and
listed, each with the test that stands for it, in $SUITE_DEDUP_MAP (when set) as
"deselected<TAB>representative" lines, so report.py can count them as the full file."""
from __future__ import annotations

import os

import pytest


def _patch(utils) -> None:
    model = os.environ["SUITE_MODEL"]
    start = utils.ServerProcess.start
    if getattr(start, "_pyllama_patched", False):
        return

    def patched_start(self, *args, **kwargs):
        if self.model_hf_repo or self.model_hf_file or self.model_url:
            self.model_file = model
            self.model_hf_repo = self.model_hf_file = self.model_url = None
        return start(self, *args, **kwargs)

    patched_start._pyllama_patched = True
    utils.ServerProcess.start = patched_start
    # load_all's downloads are what create the suite's tmp/ (utils.TMP_DIR, where presets cache
    # models); test_slot_save.py's mmproj fixture passes --slot-save-path ./tmp, which both
    # servers refuse when it is missing ("not a directory"), so it is made here instead
    utils.ServerPreset.load_all = staticmethod(lambda: os.makedirs(utils.TMP_DIR, exist_ok=True))


_MODEL_PARAMS = ("hf_repo", "model_hf_repo", "model_file")


def pytest_collection_modifyitems(session, config, items):
    if os.environ.get("SUITE_DEDUP") != "1":
        return
    first, keep, dropped = {}, [], []
    for item in items:
        cs = getattr(item, "callspec", None)
        params = {} if cs is None else {k: v for k, v in cs.params.items() if k not in _MODEL_PARAMS}
        key = (item.path, item.originalname, repr(sorted(params.items(), key=lambda kv: kv[0])))
        if key in first:
            dropped.append((item, first[key]))
        else:
            first[key] = item
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=[d for d, _ in dropped])
        items[:] = keep
        out = os.environ.get("SUITE_DEDUP_MAP")
        if out:
            with open(out, "a") as f:
                for d, rep in dropped:
                    f.write(f"{d.nodeid}\t{rep.nodeid}\n")


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session):
    import utils    # the suite's utils.py (its directory is on sys.path via its conftest)
    _patch(utils)


def pytest_sessionstart(session):
    try:
        import utils
    except ImportError:
        return
    _patch(utils)
