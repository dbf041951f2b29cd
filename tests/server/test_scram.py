"""SCRAM-SHA-256 against RFC 7677's test vector, verifiers and the users file."""

import base64
import os
import stat

import pytest

from dpsql.server import scram

# RFC 7677 section 3
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
KEY = bytes(range(32))   # the server secret keying unknown users' mock salts


def test_rfc7677_vector():
    verifier = scram.make_verifier("pencil", salt=SALT, iterations=4096)
    exchange = scram.ScramExchange("user", verifier, mock_key=KEY, nonce=SERVER_NONCE)
    assert exchange.first(CLIENT_FIRST) == SERVER_FIRST
    assert exchange.final(CLIENT_FINAL) == SERVER_FINAL


def test_wrong_password_fails():
    verifier = scram.make_verifier("not-pencil", salt=SALT, iterations=4096)
    exchange = scram.ScramExchange("user", verifier, mock_key=KEY, nonce=SERVER_NONCE)
    exchange.first(CLIENT_FIRST)
    with pytest.raises(scram.AuthFailure):
        exchange.final(CLIENT_FINAL)


def test_unknown_user_gets_stable_mock_salt_and_fails():
    a = scram.ScramExchange("mallory", None, mock_key=KEY, nonce=SERVER_NONCE).first(CLIENT_FIRST)
    b = scram.ScramExchange("mallory", None, mock_key=KEY, nonce=SERVER_NONCE).first(CLIENT_FIRST)
    c = scram.ScramExchange("trudy", None, mock_key=KEY, nonce=SERVER_NONCE).first(CLIENT_FIRST)
    assert a == b and a != c and b",i=4096" in a
    exchange = scram.ScramExchange("mallory", None, mock_key=KEY, nonce=SERVER_NONCE)
    exchange.first(CLIENT_FIRST)
    with pytest.raises(scram.AuthFailure):
        exchange.final(CLIENT_FINAL.replace(b"W22", b"W22"))


def test_tampered_nonce_and_channel_binding_rejected():
    verifier = scram.make_verifier("pencil", salt=SALT, iterations=4096)
    exchange = scram.ScramExchange("user", verifier, mock_key=KEY, nonce=SERVER_NONCE)
    exchange.first(CLIENT_FIRST)
    with pytest.raises(scram.AuthFailure, match="nonce"):
        exchange.final(CLIENT_FINAL.replace(b"r=rOpr", b"r=XOpr"))
    with pytest.raises(scram.AuthFailure, match="channel binding"):
        scram.ScramExchange("user", verifier, mock_key=KEY).first(b"p=tls-server-end-point,,n=user,r=abc")


def test_verifier_format_and_cleartext_check():
    v = scram.make_verifier("pencil")
    iterations, salt, stored, server = scram.parse_verifier(v)
    assert v.startswith("SCRAM-SHA-256$4096:") and len(salt) == 16 and len(stored) == len(server) == 32
    assert scram.check_password("pencil", v) and not scram.check_password("Pencil", v)
    with pytest.raises(ValueError):
        scram.parse_verifier("md5abcdef")


def test_users_file_mode_and_no_password_stored(tmp_path):
    path = scram.users_path(tmp_path / "dpsql.toml")
    assert path.name == "dpsql.users.json"
    scram.add_user(path, "alice", "correct horse")
    scram.add_user(path, "bob", "battery")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    text = path.read_text()
    assert "correct horse" not in text and "battery" not in text
    assert set(scram.load_users(path)) == {"alice", "bob"}
    assert scram.remove_user(path, "alice") and not scram.remove_user(path, "alice")
    assert set(scram.load_users(path)) == {"bob"}
