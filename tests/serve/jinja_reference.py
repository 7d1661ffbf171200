# SPDX-License-Identifier: Apache-2.0
# Renders Jinja2 templates with Python's jinja2 in the environment Hugging Face transformers
# renders chat templates in (a sandbox with trim_blocks, lstrip_blocks and loop controls,
# raise_exception(), a tojson that keeps non-ASCII text), for the C++ renderer's conformance tests.
#
# stdin: a JSON list of {"source": str, "vars": {...}}; stdout: a JSON list of {"ok": text} or
# {"error": message}, one per case in order.
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    results = []
    for case in json.load(sys.stdin):
        try:
            text = env.from_string(case["source"]).render(**case["vars"])
            results.append({"ok": text})
        except Exception as e:  # every failure is an expected "error" outcome for the comparison
            results.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
