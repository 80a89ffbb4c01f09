"""minitx/vocab.py: the special ids and the framing of sources and targets, written once.

`frame_source`, `frame_target` and `pad` are tested here; the last test checks that no other
module of minitx (or script) builds the framing or the padding by hand, so that training
batches, the translator, attention maps and the probes cannot drift apart.
"""

from __future__ import annotations

import ast

import pytest
import torch
from helpers import REPO_DIR

from minitx.data import collate
from minitx.vocab import BOS_ID, EOS_ID, PAD_ID, frame_source, frame_target, pad

SPECIAL = {"BOS_ID", "EOS_ID"}
FRAMING_HOME = REPO_DIR / "minitx" / "vocab.py"
FRAMING_USERS = (
    "data/batching.py",
    "translator.py",
    "teacher_forcing.py",
)
"""Modules that frame sequences (training batches, inference, the teacher-forced pass of maps,
attributions, probes and the explain experiment)."""


def test_special_ids() -> None:
    assert (PAD_ID, BOS_ID, EOS_ID) == (0, 2, 3)


def test_frame_source_appends_eos() -> None:
    assert frame_source([7, 8, 9]) == [7, 8, 9, EOS_ID]
    assert frame_source(range(5, 7)) == [5, 6, EOS_ID]  # any sequence of ids
    assert frame_source([]) == [EOS_ID]


def test_frame_target_shifts_by_bos_and_ends_the_labels_with_eos() -> None:
    decoder_input, labels = frame_target([7, 8, 9])
    assert decoder_input == [BOS_ID, 7, 8, 9]
    assert labels == [7, 8, 9, EOS_ID]
    assert len(decoder_input) == len(labels)  # position t reads input[t], predicts labels[t]
    assert frame_target([]) == ([BOS_ID], [EOS_ID])


def test_pad_right_pads_to_the_longest_row() -> None:
    out = pad([[5, 6, 7], [8], []])
    assert out.dtype == torch.long and out.device.type == "cpu"
    assert out.tolist() == [[5, 6, 7], [8, PAD_ID, PAD_ID], [PAD_ID] * 3]
    assert pad([[1], []]).shape == (2, 1)


def test_pad_rounds_the_width_up_to_a_multiple() -> None:
    assert pad([[5, 6, 7], [8]], multiple=4).tolist() == [[5, 6, 7, 0], [8, 0, 0, 0]]
    assert pad([[5, 6, 7, 8]], multiple=4).shape == (1, 4)  # already a multiple
    assert pad([[5] * 9], multiple=8).shape == (1, 16)
    with pytest.raises(ValueError, match="multiple must be >= 1"):
        pad([[5]], multiple=0)


def test_pad_of_no_rows_or_empty_rows() -> None:
    assert pad([]).shape == (0, 0)
    assert pad([[], []]).shape == (2, 0)
    assert pad([[], []]).dtype == torch.long


def test_pad_puts_the_tensor_on_the_device() -> None:
    assert pad([[5]], device="cpu").device.type == "cpu"
    assert pad([[5]], device=torch.device("meta")).device.type == "meta"


def test_collate_is_pad_of_the_framed_rows() -> None:
    examples = [
        {"src_ids": [10, 11, 12], "tgt_ids": [20, 21], "src_text": "a", "tgt_text": "b"},
        {"src_ids": list(range(4, 13)), "tgt_ids": [22], "src_text": "c", "tgt_text": "d"},
    ]
    batch = collate(examples, pad_multiple=8)
    targets = [frame_target(ex["tgt_ids"]) for ex in examples]
    sources = [frame_source(ex["src_ids"]) for ex in examples]
    assert torch.equal(batch["src"], pad(sources, multiple=8))
    assert torch.equal(batch["tgt_in"], pad([t[0] for t in targets], multiple=8))
    assert torch.equal(batch["tgt_out"], pad([t[1] for t in targets], multiple=8))
    assert batch["src"].shape == (2, 16) and batch["tgt_in"].shape == (2, 8)


# ------------------------------------------------------------------------------ written once
def _name(node: ast.AST) -> str | None:
    """`EOS_ID` for the expression ``EOS_ID`` or ``vocab.EOS_ID``; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def hand_framing(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, code) of every place that frames or pads ids by hand: a list display holding
    bos or eos beside other elements (``[*ids, EOS_ID]``, ``[BOS_ID, *ids]``), a list holding
    bos or eos concatenated to something (``ids + [EOS_ID]``, ``[BOS_ID] + ids``), or a list of
    pad ids repeated (``[PAD_ID] * n``). A bare ``[EOS_ID]`` (e.g. a hypothesis of eos alone),
    a tuple ``(EOS_ID, PAD_ID)`` (ids to strip) and ``torch.full(..., BOS_ID)`` (decoding's
    first step) frame nothing."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.List) and len(node.elts) > 1:
            if any(_name(element) in SPECIAL for element in node.elts):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.BinOp):
            sides = [side for side in (node.left, node.right) if isinstance(side, ast.List)]
            names = {_name(element) for side in sides for element in side.elts}
            if isinstance(node.op, ast.Add) and names & SPECIAL:
                found.append((node.lineno, ast.unparse(node)))
            if isinstance(node.op, ast.Mult) and "PAD_ID" in names:
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_scan_finds_hand_framing() -> None:
    code = """
src = [*ids, EOS_ID]
tgt = [vocab.BOS_ID, *ids]
out = ids + [EOS_ID]
inp = [BOS_ID] + list(ids)
row = row + [PAD_ID] * (width - len(row))
fine = [EOS_ID]
strip = [t for t in ids if t not in (EOS_ID, PAD_ID)]
start = torch.full((n, 1), BOS_ID)
"""
    assert [line for line, _ in hand_framing(ast.parse(code))] == [2, 3, 4, 5, 6]


def test_framing_and_padding_are_written_once() -> None:
    """Only minitx/vocab.py frames sources and targets or pads rows; the modules that frame
    sequences import its functions."""
    files = sorted((REPO_DIR / "minitx").rglob("*.py")) + sorted(
        (REPO_DIR / "scripts").glob("*.py")
    )
    offenders = [
        f"{path.relative_to(REPO_DIR)}:{line}: {code}"
        for path in files
        if path != FRAMING_HOME
        for line, code in hand_framing(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not offenders, "frame with minitx.vocab.frame_source / frame_target / pad:\n" + (
        "\n".join(offenders)
    )
    assert hand_framing(ast.parse(FRAMING_HOME.read_text(encoding="utf-8")))  # the one home
    for user in FRAMING_USERS:
        tree = ast.parse((REPO_DIR / "minitx" / user).read_text(encoding="utf-8"))
        imported = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "minitx.vocab"
            for alias in node.names
        }
        assert imported & {"frame_source", "frame_target"}, user


def test_no_padding_helper_is_left_elsewhere() -> None:
    """The old helpers (`_pad`, `Translator._padded`, `hypotheses_to_tensor`) are gone."""
    import minitx.data.batching as batching
    import minitx.decoding as decoding
    from minitx.translator import Translator

    assert not hasattr(batching, "_pad")
    assert not hasattr(Translator, "_padded")
    assert not hasattr(decoding, "hypotheses_to_tensor")
