import pytest
from cryptography.fernet import Fernet

from statewise.exceptions import SecretsError
from statewise.state.secrets import (
    REDACTED,
    Cipher,
    is_encrypted,
    mask_json,
    mask_text,
    redact,
    secret_values,
)


def test_round_trip_and_marker() -> None:
    cipher = Cipher(Fernet.generate_key())
    # (A space never occurs in the ciphertext's base64: a 3-letter value could, by chance.)
    marker = cipher.encrypt_value({"token": "a b", "n": [1]})
    assert list(marker) == ["$secret"] and is_encrypted(marker)
    assert "a b" not in marker["$secret"]
    assert cipher.decrypt_value(marker) == {"token": "a b", "n": [1]}
    assert not is_encrypted({"$secret": 1}) and not is_encrypted("x")


def test_wrong_key_raises_never_garbage() -> None:
    marker = Cipher(Fernet.generate_key()).encrypt_value("s")
    with pytest.raises(SecretsError, match="wrong STATEWISE_ENCRYPTION_KEY"):
        Cipher(Fernet.generate_key()).decrypt_value(marker)


def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATEWISE_ENCRYPTION_KEY", raising=False)
    with pytest.raises(SecretsError, match=r"Fernet.generate_key\(\)"):
        Cipher.from_env()
    monkeypatch.setenv("STATEWISE_ENCRYPTION_KEY", Fernet.generate_key().decode())
    cipher = Cipher.from_env()
    assert cipher.decrypt_value(cipher.encrypt_value(1)) == 1
    with pytest.raises(SecretsError, match="invalid encryption key"):
        Cipher("short")


def test_redact() -> None:
    state = {"a": 1, "pw": "x"}
    assert redact(state, {"pw", "absent"}) == {"a": 1, "pw": "***"}
    assert state["pw"] == "x"


def test_secret_values_are_the_strings_of_secret_keys_longest_first() -> None:
    state = {
        "token": "tok-123456",
        "creds": {"user": "ann", "password": "hunter22", "ids": ["abcd", "tok-1234"]},
        "pin": 1234,
        "flag": True,
        "public": "hello world",
        "sealed": {"$secret": "gAAAA"},
    }
    values = secret_values(state, ["token", "creds", "pin", "flag", "sealed", "absent"])
    assert set(values) == {"tok-123456", "hunter22", "tok-1234", "abcd"}  # "ann": too short
    assert [len(v) for v in values] == sorted((len(v) for v in values), reverse=True)
    assert secret_values(state, []) == ()


def test_mask_by_value_in_text_and_json() -> None:
    values = ("tok-123456", "tok-1234")
    assert mask_text("a tok-123456 b tok-1234", values) == f"a {REDACTED} b {REDACTED}"
    data = {"args": {"token": "tok-123456"}, "tok-1234": ["x", "said tok-1234"], "n": 3}
    assert mask_json(data, values) == {
        "args": {"token": REDACTED},
        REDACTED: ["x", f"said {REDACTED}"],
        "n": 3,
    }
    untouched = {"a": ["b", {"c": "d"}]}
    assert mask_json(untouched, values) is untouched
    assert mask_json(data, ()) is data
