#!/usr/bin/env python3
"""Two context-extension methods for one model, pair by pair: which frequency bands each keeps,
interpolates or blends, from the model's config.json.

  PYTHONPATH=build/release/python /usr/bin/python3 examples/python/compare_methods.py \
      tests/data/configs/smollm3-3b.json --factor 8 --out build/bands.png

The model's own RoPE (base θ, head_dim, pairing, layer type) is read by ropekit's config reader; the two
methods (YaRN and Llama 3 smoothing by default, both extending the model's context by --factor) are built
on it, and each pair's frequency divisor (how much the method slows that pair) is plotted against the
pair's wavelength, coloured by band.
"""
import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import ropekit  # noqa: E402

COLOURS = {"original": "grey", "extrapolated": "tab:blue", "blended": "tab:purple",
           "interpolated": "tab:red", "rescaled": "tab:orange", "not rotated": "black"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", help="a config.json (or a ropekit preset name)")
    ap.add_argument("--layer-type", default=None, help="for per-layer models, which layer type")
    ap.add_argument("--factor", type=float, default=8.0)
    ap.add_argument("--methods", default="yarn,llama3", help="two of: yarn, llama3, linear, dynamic")
    ap.add_argument("--out", default="bands.png")
    a = ap.parse_args()

    plan = ropekit.model_positions(a.config)
    model = ropekit.Rope.from_config(a.config, layer_type=a.layer_type)
    if isinstance(model, dict):
        raise SystemExit(f"several RoPE layer types ({', '.join(model)}): pass --layer-type")
    spec = model.spec
    length = plan["max_position_embeddings"] or 4096
    fragments = {
        "yarn": {"rope_type": "yarn", "factor": a.factor, "original_max_position_embeddings": length},
        "llama3": {"rope_type": "llama3", "factor": a.factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": length},
        "linear": {"rope_type": "linear", "factor": a.factor},
        "dynamic": {"rope_type": "dynamic", "factor": a.factor},
    }
    methods = a.methods.split(",")
    fig, axes = plt.subplots(1, len(methods), figsize=(6 * len(methods), 4.2), sharey=True)
    for ax, name in zip(np.atleast_1d(axes), methods):
        rope = ropekit.Rope(spec["head_dim"], rotary_dim=spec["rotary_dim"], base=spec["base"],
                            pairing=spec["pairing"], rope_scaling=fragments[name],
                            max_position_embeddings=length, current_length=int(length * a.factor))
        b = rope.bands(context=length)
        base_wavelength = b["wavelength"] / b["divisor"]  # the unscaled pair's wavelength
        for band in sorted(set(b["band"])):
            sel = np.array(b["band"]) == band
            ax.scatter(base_wavelength[sel], b["divisor"][sel], s=14, c=COLOURS.get(band, "k"), label=band)
        ax.axvline(length, ls="--", c="k", lw=0.8)
        ax.text(length, a.factor, f" trained length {length}", va="top", fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel("wavelength of the pair before scaling (tokens)")
        ax.set_title(f"{name} × {a.factor:g}  (cos/sin magnitude {rope.cos_sin_scale:.3f})")
        ax.legend(fontsize=8)
    np.atleast_1d(axes)[0].set_ylabel("frequency divisor (1 = kept)")
    fig.suptitle(f"{plan['model_type']} ({a.config}): base {spec['base']:g}, head_dim {spec['head_dim']}, "
                 f"rotary_dim {spec['rotary_dim']}, {spec['pairing']} pairs")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
