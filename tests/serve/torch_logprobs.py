# SPDX-License-Identifier: Apache-2.0
# PyTorch's log-probabilities for the sampler tests: for each case of the input JSON (raw logits,
# prompt and generated ids, penalties, temperature), the repetition penalty as Hugging Face's
# RepetitionPenaltyLogitsProcessor applies it, OpenAI's presence and frequency penalties, then
# torch.log_softmax(logits / temperature) in float64 (temperature 0: 1). Writes the rows as
# little-endian float64. Usage: torch_logprobs.py IN.json OUT.bin
import json
import struct
import sys

import torch


def main():
    cases = json.load(open(sys.argv[1]))["cases"]
    with open(sys.argv[2], "wb") as out:
        for c in cases:
            logits = torch.tensor(c["logits"], dtype=torch.float64)
            vocab = logits.numel()
            seen = sorted(set(c["prompt"]) | set(c["generated"]))
            if seen:
                index = torch.tensor(seen, dtype=torch.long)
                score = logits.gather(0, index)
                score = torch.where(score < 0, score * c["repetition_penalty"],
                                    score / c["repetition_penalty"])
                logits = logits.scatter(0, index, score)
            counts = torch.zeros(vocab, dtype=torch.float64)
            for token in c["generated"]:
                counts[token] += 1
            logits = logits - counts * c["frequency_penalty"]
            logits = logits - (counts > 0).to(torch.float64) * c["presence_penalty"]
            temperature = c["temperature"] or 1.0
            row = torch.log_softmax(logits / temperature, dim=-1)
            out.write(struct.pack("<%dd" % vocab, *row.tolist()))


if __name__ == "__main__":
    main()
