"""Renders chat templates with Jinja2 (the engine Hugging Face's apply_chat_template uses) into
tests/data/chat/golden.json, the reference tests/tokenizer_test.cpp holds tokenizer/chat.cpp to.

    /usr/bin/python3 train/make_chat_fixtures.py    # needs python3-jinja2 (install-deps --train)

The templates are the formats as the model families declare them: LLaMA-3's headers (LLaDA-8B-
Instruct), Qwen2's ChatML with its default system message (Dream), ChatML without one, and the
identity template of the shipped tiny models. bos_token is empty: the tokenizer adds BOS.
"""

import json
import os

import jinja2

TEMPLATES = {
    "llama3": (
        "{% set loop_messages = messages %}{% for message in loop_messages %}"
        "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
        "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
        "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
        "{% endif %}"),
    "chatml-default-system": (
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
    "chatml": (
        "{%- for message in messages %}\n"
        "    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n"),
    "plain": "{% for message in messages %}{{ message['content'] }}{% endfor %}",
    "plain-spaced": "{%- for message in messages -%}\n  {{- message.content -}}\n{%- endfor -%}",
}

CONVERSATIONS = [
    [{"role": "user", "content": "6238+0032="}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "  spaced\n"}, {"role": "assistant", "content": "ok"},
     {"role": "user", "content": "again: ünïcode"}],
]


def main():
    env = jinja2.Environment()
    cases = []
    for name, text in TEMPLATES.items():
        t = env.from_string(text)
        for conv in CONVERSATIONS:
            cases.append({"template_name": name, "template": text, "messages": conv,
                          "expected": t.render(messages=conv, add_generation_prompt=True,
                                               bos_token="")})
    out = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "chat", "golden.json")
    with open(out, "w") as f:
        json.dump({"generator": "train/make_chat_fixtures.py (Jinja2 " + jinja2.__version__ + ")",
                   "cases": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{out}: {len(cases)} cases")


if __name__ == "__main__":
    main()
