#!/usr/bin/env python3
"""Print SigV4 fixtures for S3-style requests, signed by botocore, as JSON.

The Swift tests (Tests/AttachmentSyncS3Tests) sign the same requests with SigV4Signer and compare the
canonical request, the string to sign and the Authorization header (or the presigned query) with botocore's,
a second implementation written independently of ours.

Regenerate with:

    pip install botocore
    python3 scripts/gen-sigv4-fixtures.py > Tests/AttachmentSyncS3Tests/Resources/botocore-sigv4-fixtures.json
"""

import datetime
import hashlib
import json
import sys
from unittest import mock
from urllib.parse import quote

import botocore
import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

SIGNING_TIME = datetime.datetime(2026, 1, 15, 10, 20, 30)
ACCESS_KEY = "AKIAFIXTURE000000001"
SECRET_KEY = "fixture/secret+key/0000000000000000000000"
SESSION_TOKEN = "FQoGZXIvYXdzEXAMPLE//session+token/with=padding=="

# Each case: a request as our signer sees it (decoded path and query, the headers to sign) and how to sign it.
CASES = [
    {
        "name": "put-object-with-payload-hash",
        "method": "PUT",
        "base": "http://127.0.0.1:7480",
        "path": "/attachments-bucket/photos/a1b2c3.jpg",
        "headers": [["Content-MD5", "XrY7u+Ae7tCTyyK7j1rNww=="], ["Content-Type", "image/jpeg"]],
        "body": "hello attachment",
    },
    {
        "name": "get-object-with-range",
        "method": "GET",
        "base": "http://127.0.0.1:7480",
        "path": "/attachments-bucket/photos/a1b2c3.jpg",
        "headers": [["Range", "bytes=1048576-"]],
    },
    {
        "name": "delete-object",
        "method": "DELETE",
        "base": "http://127.0.0.1:7480",
        "path": "/attachments-bucket/photos/a1b2c3.jpg",
    },
    {
        "name": "key-with-spaces-unicode-and-specials",
        "method": "PUT",
        "base": "http://127.0.0.1:7480",
        "path": "/attachments-bucket/my photos/r\u00e9sum\u00e9 \u1234 (1)+a=b&c;d,e@f$g!'*~%h#i?.jpg",
        "headers": [["Content-Type", "application/octet-stream"]],
        "body": "special",
    },
    {
        "name": "virtual-host-unsigned-payload-over-https",
        "method": "PUT",
        "base": "https://attachments-bucket.s3.eu-west-1.amazonaws.com",
        "region": "eu-west-1",
        "path": "/photos/large file.bin",
        "headers": [["Content-MD5", "1B2M2Y8AsgTpgAmY7PhCfg=="]],
        "body": "streamed",
        "unsignedPayload": True,
    },
    {
        "name": "session-token",
        "method": "GET",
        "base": "http://127.0.0.1:7480",
        "path": "/attachments-bucket/photos/a1b2c3.jpg",
        "sessionToken": SESSION_TOKEN,
    },
    {
        "name": "upload-part-query",
        "method": "PUT",
        "base": "http://127.0.0.1:7480",
        "path": "/attachments-bucket/big/video.mp4",
        "query": [["partNumber", "3"], ["uploadId", "2~abc/DEF+ghi="]],
        "body": "part three",
    },
    {
        "name": "list-multipart-uploads",
        "method": "GET",
        "base": "http://127.0.0.1:7480",
        "path": "/attachments-bucket",
        "query": [["uploads", ""], ["prefix", "app one/"], ["max-uploads", "1000"]],
    },
    {
        "name": "presigned-get",
        "method": "GET",
        "base": "http://127.0.0.1:7480",
        "path": "/attachments-bucket/my photos/r\u00e9sum\u00e9 (1).jpg",
        "presignExpires": 900,
    },
    {
        "name": "presigned-put-with-session-token",
        "method": "PUT",
        "base": "https://attachments-bucket.s3.eu-west-1.amazonaws.com",
        "region": "eu-west-1",
        "path": "/uploads/new file.bin",
        "sessionToken": SESSION_TOKEN,
        "presignExpires": 604800,
    },
]


def encoded_url(case):
    url = case["base"] + quote(case["path"], safe="/~")
    query = case.get("query", [])
    if query:
        url += "?" + "&".join(quote(k, safe="-_.~") + "=" + quote(v, safe="-_.~") for k, v in query)
    return url


def sign(case):
    region = case.get("region", "us-east-1")
    credentials = Credentials(ACCESS_KEY, SECRET_KEY, case.get("sessionToken"))
    body = case.get("body", "").encode("utf-8")
    context = {}
    if case.get("unsignedPayload"):
        context["client_config"] = Config(s3={"payload_signing_enabled": False})
    request = AWSRequest(
        method=case["method"], url=encoded_url(case), headers=dict(case.get("headers", [])), data=body
    )
    request.context.update(context)
    if "presignExpires" in case:
        auth = botocore.auth.S3SigV4QueryAuth(credentials, "s3", region, expires=case["presignExpires"])
    else:
        auth = botocore.auth.S3SigV4Auth(credentials, "s3", region)
    # The same steps as botocore's add_auth, with the intermediate values kept.
    request.context["timestamp"] = SIGNING_TIME.strftime(botocore.auth.SIGV4_TIMESTAMP)
    auth._modify_request_before_signing(request)
    canonical_request = auth.canonical_request(request)
    string_to_sign = auth.string_to_sign(request, canonical_request)
    signature = auth.signature(string_to_sign, request)
    auth._inject_signature_to_request(request, signature)
    expected = {
        "canonicalRequest": canonical_request,
        "stringToSign": string_to_sign,
        "signature": signature,
    }
    if "presignExpires" in case:
        expected["url"] = request.url
    else:
        expected["authorization"] = request.headers["Authorization"]
        expected["payloadHash"] = request.headers["X-Amz-Content-SHA256"]
    result = {
        "name": case["name"],
        "method": case["method"],
        "base": case["base"],
        "region": region,
        "path": case["path"],
        "query": case.get("query", []),
        "headers": case.get("headers", []),
        "body": case.get("body", ""),
        "bodySHA256": hashlib.sha256(body).hexdigest(),
        "unsignedPayload": bool(case.get("unsignedPayload")),
        "sessionToken": case.get("sessionToken"),
        "presignExpires": case.get("presignExpires"),
        "expected": expected,
    }
    return result


def main():
    with mock.patch.object(botocore.auth, "get_current_datetime", return_value=SIGNING_TIME):
        fixtures = {
            "generator": "scripts/gen-sigv4-fixtures.py",
            "botocoreVersion": botocore.__version__,
            "accessKeyId": ACCESS_KEY,
            "secretAccessKey": SECRET_KEY,
            "signingTime": SIGNING_TIME.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "cases": [sign(case) for case in CASES],
        }
    json.dump(fixtures, sys.stdout, indent=2, ensure_ascii=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
