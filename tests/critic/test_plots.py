"""Figures saved with their captions (critic.plots): what a report shows under a figure file is its caption,
read back from the file, never its name."""

from __future__ import annotations

import pytest

from critic.plots import figure_caption, new_figure, save_figure


def _figure():
    fig = new_figure(figsize=(2, 2))
    ax = fig.subplots()
    ax.plot([0, 1], [1, 0])
    ax.set_title("a title")
    return fig


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_a_caption_is_kept_in_the_figure_file_and_read_back(tmp_path, suffix):
    caption = "Transitions of 'gens' against 'reference': P_gens - P_reference, <bos> & <eos> — ünïcode"
    path = save_figure(_figure(), tmp_path / f"f{suffix}", caption=caption)
    assert figure_caption(path) == caption
    plain = save_figure(_figure(), tmp_path / f"plain{suffix}")
    assert figure_caption(plain) is None


def test_no_caption_from_files_that_are_not_figures(tmp_path):
    (tmp_path / "x.npy").write_bytes(b"\x93NUMPY")
    (tmp_path / "x.png").write_text("not a png")
    assert figure_caption(tmp_path / "x.npy") is None and figure_caption(tmp_path / "x.png") is None
    assert figure_caption(tmp_path / "absent.png") is None
