"""The one integer parser: ASCII digits only, bounded."""
import pytest

from ddpdoctor.numbers import is_int_text, parse_int


@pytest.mark.parametrize("text", ["²", "①", "١٢", "", " ", "1.0", "0x10", "1e3", "--1", "+-1", "1 2", "9" * 20])
def test_rejects_what_is_not_an_ascii_integer(text):
    assert parse_int(text) is None
    assert not is_int_text(text)


def test_accepts_ascii_digits_within_bounds():
    assert parse_int("42") == 42
    assert parse_int(" 7\n") == 7
    assert parse_int(" 7\n", strip=False) is None
    assert parse_int("70000", hi=65535) is None
    assert parse_int("0", lo=1) is None
    assert parse_int("-3") is None
    assert parse_int("-3", signed=True, lo=None) == -3
    assert parse_int(5) == 5
    assert parse_int(True) is None
    assert parse_int(None) is None
    assert parse_int(3.0) is None
