#!/usr/bin/env python3
"""docs/admin/kueue.md and docs/user/queueing.md show only YAML that the Kueue
scenario test applies: every ```yaml block in them must be byte-identical to a file of examples/ (the
scenario, kueue_test.py, applies every file of examples/kueue/ but
topology.yaml, which test/node/multinode_node_test.py applies). Each block
is preceded by a line naming its file, so the check also catches a block
pasted under the wrong name."""

import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = [os.path.join("docs", "admin", "kueue.md"), os.path.join("docs", "user", "queueing.md")]


def main():
    examples = {}
    for root, _, files in os.walk(os.path.join(REPO, "examples")):
        for name in files:
            if name.endswith((".yaml", ".yml")):
                path = os.path.join(root, name)
                with open(path) as f:
                    examples[os.path.relpath(path, REPO)] = f.read()
    failed = total = 0
    for doc in DOCS:
        with open(os.path.join(REPO, doc)) as f:
            text = f.read()
        blocks = list(re.finditer(r"^```ya?ml\n(.*?)^```$", text, re.S | re.M))
        total += len(blocks)
        failed += check(doc, text, blocks, examples)
    if total < 5:
        print(f"{', '.join(DOCS)}: only {total} YAML blocks found")
        failed += 1
    print(f"{total - failed if failed <= total else 0} of {total} YAML blocks match examples/")
    return 1 if failed else 0


def check(doc, text, blocks, examples):
    failed = 0
    for m in blocks:
        line = text.count("\n", 0, m.start()) + 1
        body = m.group(1)
        same = [p for p, content in examples.items() if content == body]
        # The file the text names just before the block (e.g. `examples/kueue/x.yaml`).
        named = re.findall(r"`(examples/[^`]+\.ya?ml)`", text[max(0, m.start() - 400):m.start()])
        if not same:
            print(f"{doc}:{line}: YAML block is not byte-identical to any file of examples/")
            failed += 1
        elif not named or named[-1] not in same:
            print(f"{doc}:{line}: block equals {same} but the text before it names "
                  f"{named[-1] if named else 'no examples/ file'}")
            failed += 1
    return failed


if __name__ == "__main__":
    sys.exit(main())
