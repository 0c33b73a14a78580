#!/usr/bin/env python3
"""Decrypts an AttachmentSync encrypted attachment (format version 1).

Written from the DocC article "Encrypted attachment format" alone, with the `cryptography` package, as a
second implementation the Swift tests check the library against.

Usage: decode_attachment.py KEYS ATTACHMENT_ID INPUT OUTPUT
  KEYS           a JSON object mapping key ids to base64-encoded 32-byte master keys
  ATTACHMENT_ID  the id of the attachment the file is read as (it is not in the file)
  INPUT          the encrypted file
  OUTPUT         where the content is written (only when the whole file authenticated)
Exits 0 on success; 1 with the reason on standard error when the file is rejected.
"""
import base64
import json
import struct
import sys

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

TAG = 16


def reject(reason):
    sys.stderr.write("rejected: " + reason + "\n")
    sys.exit(1)


def decode(keys, attachment_id, data):
    if len(data) < 9 or data[0:3] != b"ASE":
        reject("not an encrypted attachment")
    if data[3] != 1:
        reject("unknown format version %d" % data[3])
    (segment_size,) = struct.unpack(">I", data[4:8])
    if not 1024 <= segment_size <= 16777216:
        reject("segment size %d out of range" % segment_size)
    id_length = data[8]
    if id_length == 0:
        reject("empty key id")
    header_length = 48 + id_length
    if len(data) < header_length:
        reject("the file ends inside its header")
    header = data[:header_length]
    try:
        key_id = data[9 : 9 + id_length].decode("utf-8")
    except UnicodeDecodeError:
        reject("the key id is not UTF-8")
    salt = data[9 + id_length : 41 + id_length]
    prefix = data[41 + id_length : header_length]
    if key_id not in keys:
        reject("no key for key id %r" % key_id)
    file_key = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=salt, info=b"AttachmentSync encrypted attachment v1"
    ).derive(keys[key_id])
    aead = AESGCM(file_key)
    associated = header + attachment_id.encode("utf-8")
    content = bytearray()
    position = header_length
    index = 0
    whole = segment_size + TAG
    while True:
        # A segment of the whole size is never the last one; a shorter one always is.
        last = len(data) - position < whole
        segment = data[position:] if last else data[position : position + whole]
        if len(segment) < TAG:
            reject("the file ends before its last segment")
        nonce = prefix + struct.pack(">I", index) + (b"\x01" if last else b"\x00")
        try:
            content += aead.decrypt(nonce, segment, associated)
        except InvalidTag:
            reject("segment %d does not authenticate" % index)
        position += len(segment)
        index += 1
        if last:
            return bytes(content)


def main():
    if len(sys.argv) != 5:
        sys.stderr.write(__doc__)
        sys.exit(2)
    with open(sys.argv[1]) as handle:
        keys = {key_id: base64.b64decode(value) for key_id, value in json.load(handle).items()}
    with open(sys.argv[3], "rb") as handle:
        data = handle.read()
    content = decode(keys, sys.argv[2], data)
    with open(sys.argv[4], "wb") as handle:
        handle.write(content)


if __name__ == "__main__":
    main()
