"""Build a small GPT with the Python API and train it for a few steps on tiny Shakespeare.

python examples/train_gpt.py [backend]      # backend: cpu (default), opencl, metal, auto
"""

import sys

import numpy as np
import riftco
from riftco.nn import GPT, GPTConfig
from riftco.optim import AdamW, clip_grad_norm
from riftco.train.data import CharDataset, load_text
from riftco.train.sample import generate

device = riftco.device(sys.argv[1] if len(sys.argv) > 1 else "cpu")
text, source = load_text()  # the corpus shipped inside the package
data = CharDataset.from_text(text, context=32, source=source)
config = GPTConfig(vocab=data.tokenizer.vocab_size, context=32, layers=2, heads=2, width=64)
model = GPT(config, device=device, seed=0)
opt = AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95))
rng = np.random.default_rng(0)
print(f"{model.num_parameters():,} parameters on {device}")

for step in range(1, 61):
    x, y = data.batch("train", 16, config.context, rng)  # (B, T) int32 each
    loss = model.loss(riftco.tensor(x, device=device), riftco.tensor(y, device=device))
    loss.backward()  # replaces .grad on every parameter
    clip_grad_norm(model.parameters(), 1.0)
    opt.step()
    if step % 10 == 0:
        print(f"step {step:3d}  loss {loss.item():.3f}")

print(generate(model, data.tokenizer, "ROMEO:", 80, temperature=0.8, seed=0))
