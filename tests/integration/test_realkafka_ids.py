# SPDX-License-Identifier: Apache-2.0
"""realkafka's cluster ids are arguments to kafka-storage, whose parser takes
a leading '-' for an option: an id must never start with one (Kafka's own
Uuid.randomUuid() draws again for the same reason). A base64 id starts with
'-' one time in 64, so 20,000 draws find the fault with near certainty."""
import base64
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import realkafka  # noqa: E402

for _ in range(20000):
    cid = realkafka.new_cluster_id()
    if cid.startswith("-"):
        print("FAIL: cluster id %r starts with '-'" % cid)
        sys.exit(1)
    if len(cid) != 22 or len(base64.urlsafe_b64decode(cid + "==")) != 16:
        print("FAIL: cluster id %r is not 16 bytes of url-safe base64" % cid)
        sys.exit(1)
print("ok: 20000 cluster ids, none starting with '-'")
