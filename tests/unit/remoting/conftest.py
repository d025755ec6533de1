"""The codec's two implementations, for tests that must pass on both (common/speedups.py)."""

from __future__ import annotations

import importlib

import pytest

from cluster.remoting import codec

try:  # straight from the extension: the compiled runs are kept under ROCKETDESK_PURE=1 too
    _core = importlib.import_module("common._speedups")
    COMPILED = codec._compiled(_core)
    SPLIT = _core.split_frame
    SPLIT_RUN = _core.split_run
except ImportError:
    COMPILED = SPLIT = SPLIT_RUN = None


@pytest.fixture(scope="module", params=["compiled", "pure"])
def header_codec(request):
    """Run the test on the compiled core's header functions, then on the pure reference.

    Module-scoped (hypothesis refuses function-scoped fixtures around @given tests), so the
    codec's selected functions are swapped by hand and put back afterwards.
    """
    implementation = COMPILED if request.param == "compiled" else codec.PURE
    if implementation is None:
        pytest.skip("the compiled core is not built")
    with pytest.MonkeyPatch.context() as patch:
        for name, function in implementation._asdict().items():
            patch.setattr(codec, f"_{name}", function)
        # FrameDecoder's compiled split decodes headers itself: off on the pure run.
        patch.setattr(codec, "_split_frame", SPLIT if request.param == "compiled" else None)
        patch.setattr(codec, "_split_run", SPLIT_RUN if request.param == "compiled" else None)
        yield request.param
