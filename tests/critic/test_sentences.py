"""The one rule sentence splitter: spans, titles and initials, blank lines."""

from critic.sentences import sentence_spans, sentences


def test_breaks_after_end_marks_not_after_titles_or_initials():
    text = "Dr. Who is here. He left!  \"Then\" she said.\n\nNew part"
    assert [text[s:e] for s, e in sentence_spans(text)] == ["Dr. Who is here.", "He left!", "\"Then\" she said.",
                                                            "New part"]
    assert sentences("J. R. R. Tolkien wrote. It sold.") == ["J. R. R. Tolkien wrote.", "It sold."]


def test_a_blank_line_ends_a_sentence_and_spans_skip_space():
    text = "  a line without a stop\n \nnext one?  Yes 2 more.  "
    spans = sentence_spans(text)
    assert [text[s:e] for s, e in spans] == ["a line without a stop", "next one?", "Yes 2 more."]
    assert all(not text[s].isspace() and not text[e - 1].isspace() for s, e in spans)
    assert sentence_spans("") == [] and sentence_spans(" \n ") == []


def test_lower_case_after_a_stop_does_not_break():
    assert sentences("See e.g. the manual. and so on. Then stop.") == ["See e.g. the manual. and so on.", "Then stop."]
