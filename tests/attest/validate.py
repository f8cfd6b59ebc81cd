"""Checks a quantforge attestation with references nobody here wrote.

The in-toto attestation bindings from PyPI (`in-toto-attestation`) parse
the Statement and its SLSA Provenance v1 predicate strictly against their
protobuf schemas (an unknown or mistyped field fails) and apply the
bindings' own validation; a DSSE envelope's ed25519 signature is checked
with `cryptography` over the pre-authentication encoding, computed here.

    python3 tests/attest/validate.py ATTESTATION [PUBLIC_KEY.pem]

Prints `valid` and exits 0, or says why not and exits 1.
"""

import base64
import json
import sys

from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement

SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"


def payload_of(document, public_key_path):
    if "payloadType" not in document:
        if public_key_path:
            sys.exit("a bare statement has no signature")
        return json.dumps(document)
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    payload = base64.b64decode(document["payload"], validate=True)
    kind = document["payloadType"].encode()
    pae = b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)
    with open(public_key_path, "rb") as f:
        key = load_pem_public_key(f.read())
    for signature in document["signatures"]:
        try:
            key.verify(base64.b64decode(signature["sig"]), pae)
            return payload.decode()
        except InvalidSignature:
            continue
    sys.exit("no signature verifies")


def main():
    with open(sys.argv[1]) as f:
        document = json.load(f)
    text = payload_of(document, sys.argv[2] if len(sys.argv) > 2 else None)
    statement = json_format.Parse(text, statement_pb2.Statement())
    Statement.copy_from_pb(statement).validate()
    if statement.predicate_type != SLSA_PROVENANCE_V1:
        sys.exit(f"predicate type {statement.predicate_type}")
    predicate = json_format.ParseDict(json.loads(text)["predicate"], provenance_pb2.Provenance())
    definition = predicate.build_definition
    # SLSA Provenance v1: buildType, externalParameters and builder.id are required.
    if not definition.build_type or not definition.external_parameters or not predicate.run_details.builder.id:
        sys.exit("buildType, externalParameters and runDetails.builder.id are required")
    for dependency in definition.resolved_dependencies:
        ResourceDescriptor.copy_from_pb(dependency).validate()
        if not dependency.digest:
            sys.exit(f"dependency {dependency.name} has no digest")
    print("valid")


if __name__ == "__main__":
    main()
