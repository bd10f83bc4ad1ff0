"""Verifies a Sagaplane signature with implementations we did not write.

Usage: verify_jws.py SIGNED.json PUBLIC.jwk

Canonicalises the object without its "signatures" member with the `rfc8785` package,
checks the protected header, and verifies the Ed25519 signature with `cryptography`.
Prints "ok <kid>" and exits 0 when it verifies; prints the reason and exits 1 otherwise.
"""

import base64
import json
import sys

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def main() -> int:
    signed_path, jwk_path = sys.argv[1], sys.argv[2]
    with open(signed_path, encoding="utf-8") as f:
        signed = json.load(f)
    with open(jwk_path, encoding="utf-8") as f:
        jwk = json.load(f)
    if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
        print("not an Ed25519 JWK")
        return 1
    key = Ed25519PublicKey.from_public_bytes(b64url_decode(jwk["x"]))

    signatures = signed.pop("signatures", [])
    if not signatures:
        print("no signatures")
        return 1
    payload = b64url_encode(rfc8785.dumps(signed))
    for sig in signatures:
        header = json.loads(b64url_decode(sig["protected"]))
        if header.get("alg") != "EdDSA" or header.get("typ") != "JOSE" or "kid" not in header:
            print(f"unexpected protected header {header}")
            return 1
        if header["kid"] != jwk.get("kid"):
            continue
        try:
            key.verify(b64url_decode(sig["signature"]), f"{sig['protected']}.{payload}".encode())
        except InvalidSignature:
            print("signature does not verify")
            return 1
        print(f"ok {header['kid']}")
        return 0
    print("no signature by this key")
    return 1


if __name__ == "__main__":
    sys.exit(main())
