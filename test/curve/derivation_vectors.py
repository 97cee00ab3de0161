#!/usr/bin/env python3
"""Independent implementation of the flux-curve-csi key derivation.

Written from the design (HKDF-SHA256 from python3-cryptography, X25519 base
point multiplication from python3-nacl, Z85 from the ZeroMQ RFC 32 alphabet)
and sharing no code with the C++ one, so the pinned vectors in
derivation_vectors.json are checked by two implementations.

  derivation_vectors.py          print the vectors as JSON
  derivation_vectors.py --check  FILE: exit 1 unless FILE matches
"""
import json
import struct
import sys

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from nacl.bindings import crypto_scalarmult_base

SALT = b"curve.minicluster.dev/v1"
Z85 = ("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
       ".-:+=^!/*?&<>()[]{}@%$#")

# Fixed test master keys: never used anywhere but here.
MASTER_KEYS = {
    "seq64": bytes(range(64)),
    "ascii32": b"flux-curve-csi test master key!!",
}
INPUTS = [
    ("seq64", "default", "lammps", ""),
    ("seq64", "default", "lammps", "0f8e4b5c-1c1e-4c43-9f5e-8f0b3c9d2a71"),
    ("seq64", "default", "lammps", "6a1d0e7e-3f7b-4d8e-b0a6-2c5f9e1d4b38"),
    ("seq64", "team-a", "lammps", "0f8e4b5c-1c1e-4c43-9f5e-8f0b3c9d2a71"),
    ("seq64", "default", "a.b", "c"),
    ("seq64", "default.a", "b", "c"),
    ("ascii32", "default", "lammps", ""),
    ("ascii32", "hpc-users", "gromacs-2024.x", "uid-1"),
]


def z85_encode(data):
    assert len(data) % 4 == 0
    out = []
    for i in range(0, len(data), 4):
        (value,) = struct.unpack(">I", data[i:i + 4])
        chunk = []
        for _ in range(5):
            value, rem = divmod(value, 85)
            chunk.append(Z85[rem])
        out.extend(reversed(chunk))
    return "".join(out)


def info(namespace, name, generation):
    out = b""
    for field in (namespace, name, generation):
        raw = field.encode()
        out += struct.pack(">I", len(raw)) + raw
    return out


def derive(master, namespace, name, generation):
    secret = HKDF(algorithm=hashes.SHA256(), length=32, salt=SALT,
                  info=info(namespace, name, generation)).derive(master)
    return z85_encode(crypto_scalarmult_base(secret)), z85_encode(secret)


def vectors():
    out = {"salt": SALT.decode(),
           "master_keys_hex": {k: v.hex() for k, v in MASTER_KEYS.items()},
           "vectors": []}
    for key, namespace, name, generation in INPUTS:
        public, secret = derive(MASTER_KEYS[key], namespace, name, generation)
        out["vectors"].append({
            "master_key": key, "namespace": namespace, "name": name,
            "generation": generation, "public_z85": public,
            "secret_z85": secret})
    return out


def main(argv):
    if len(argv) == 3 and argv[1] == "--check":
        with open(argv[2]) as f:
            pinned = json.load(f)
        if pinned != vectors():
            print("derivation_vectors.py: the pinned vectors in %s do not "
                  "match this independent implementation" % argv[2])
            return 1
        print("1 passed, 0 failed")
        return 0
    json.dump(vectors(), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
