import pytest
from cryptography.fernet import Fernet

from statewise.exceptions import SecretsError
from statewise.state.secrets import Cipher, is_encrypted, redact


def test_round_trip_and_marker() -> None:
    cipher = Cipher(Fernet.generate_key())
    marker = cipher.encrypt_value({"token": "abc", "n": [1]})
    assert list(marker) == ["$secret"] and is_encrypted(marker)
    assert "abc" not in marker["$secret"]
    assert cipher.decrypt_value(marker) == {"token": "abc", "n": [1]}
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
