"""The ctypes structs against the layout clang computes for ssu.h.

bindgen's layout tests in the committed Rust bindings (kept current with
the header by tools/regen-rust-bindings.sh --check) state each struct's
size and every field offset as clang computed them; ctypes must agree."""

import ctypes
import os
import re

import pytest

from ssu import _lib

BINDINGS = os.path.join(os.path.dirname(__file__), "..", "..", "rust", "ssu-sys", "src",
                        "bindings.rs")


def clang_layout():
    text = open(BINDINGS).read()
    sizes = dict((m.group(1), int(m.group(2))) for m in re.finditer(
        r"size_of::<(\w+)>\(\),\s*(\d+)usize", text))
    offsets = {}
    for m in re.finditer(r"\(\*ptr\)\.(\w+)\) as usize - ptr as usize\s*\},\s*(\d+)usize,"
                         r"\s*concat!\(\s*\"Offset of field: \",\s*stringify!\((\w+)\)", text):
        offsets.setdefault(m.group(3), {})[m.group(1)] = int(m.group(2))
    return sizes, offsets


@pytest.mark.skipif(not os.path.exists(BINDINGS), reason="Rust bindings not in this tree")
def test_ctypes_matches_clang():
    sizes, offsets = clang_layout()
    structs = {"ssu_tensor": _lib.ssu_tensor_t, "ssu_state_pool": _lib.ssu_state_pool_t,
               "ssu_context_options": _lib.ssu_context_options_t,
               "ssu_plan_options": _lib.ssu_plan_options_t,
               "ssu_plan_info": _lib.ssu_plan_info_t,
               "ssu_update_args": _lib.ssu_update_args_t,
               "ssu_mamba3_step_args": _lib.ssu_mamba3_step_args_t,
               "ssu_mamba3_rotary_args": _lib.ssu_mamba3_rotary_args_t,
               "ssu_replay_ring": _lib.ssu_replay_ring_t,
               "ssu_replay_args": _lib.ssu_replay_args_t,
               "ssu_replay_flush_args": _lib.ssu_replay_flush_args_t}
    assert set(structs) <= set(sizes), f"bindgen layout tests missing: {set(structs) - set(sizes)}"
    for cname, struct in structs.items():
        assert ctypes.sizeof(struct) == sizes[cname], cname
        assert [f for f, _ in struct._fields_] == list(offsets[cname]), cname
        for field, off in offsets[cname].items():
            assert getattr(struct, field).offset == off, f"{cname}.{field}"


def test_import_check_matches_ctypes():
    _lib.check_layout()  # what import already ran; a wrong table would raise
    for struct, (size, offs) in _lib.EXPECTED_LAYOUT.items():
        assert ctypes.sizeof(struct) == size


def test_library_struct_sizes():
    """The loaded library's sizeof() of every struct equals the package's."""
    import ssu
    names = {"tensor": _lib.ssu_tensor_t, "state_pool": _lib.ssu_state_pool_t,
             "context_options": _lib.ssu_context_options_t,
             "plan_options": _lib.ssu_plan_options_t, "plan_info": _lib.ssu_plan_info_t,
             "update_args": _lib.ssu_update_args_t,
             "mamba3_step_args": _lib.ssu_mamba3_step_args_t,
             "mamba3_rotary_args": _lib.ssu_mamba3_rotary_args_t,
             "replay_ring": _lib.ssu_replay_ring_t, "replay_args": _lib.ssu_replay_args_t,
             "replay_flush_args": _lib.ssu_replay_flush_args_t}
    for name, struct in names.items():
        assert ssu.struct_size(name) == ctypes.sizeof(struct), name
    assert _lib.lib.ssu_struct_size(99) == 0
