#!/usr/bin/env python3
"""Reference renderer for chat_reference_test.go.

Renders chat templates with Python jinja2 set up the way Hugging Face
transformers' apply_chat_template sets it up: an ImmutableSandboxedEnvironment
with trim_blocks, lstrip_blocks, the loopcontrols extension and the
{% generation %} tag, a tojson
filter calling json.dumps(ensure_ascii=False, ...), raise_exception and
strftime_now (here with a fixed time, for repeatable tests).

stdin:  {"now": "YYYY-MM-DDTHH:MM:SS", "templates": {name: source},
         "cases": [{"template": name, "vars": {...}}]}
stdout: [{"text": rendered} or {"error": message, "class": exception class},
        ...], one per case.
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    """transformers' {% generation %} tag, without the mask it records."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def compile_template(source, now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def main():
    req = json.load(sys.stdin)
    now = datetime.fromisoformat(req["now"])
    compiled = {name: compile_template(src, now) for name, src in req["templates"].items()}
    out = []
    for case in req["cases"]:
        try:
            out.append({"text": compiled[case["template"]].render(**case["vars"])})
        except Exception as e:  # the Go side must fail too
            out.append({"error": "%s: %s" % (type(e).__name__, e), "class": type(e).__name__})
    json.dump(out, sys.stdout, ensure_ascii=False)


main()
