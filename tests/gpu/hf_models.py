#!/usr/bin/env python3
"""Real models through gllmd: Hugging Face transformers' own modelling code (random weights
from a small config of each family, nothing downloaded) with attn_implementation="gllm"
(gllm.integrations.transformers), against transformers' float32 eager path and its bf16
SDPA or eager path in the same call.

Usage: hf_models.py --socket PATH [--models LIST] [--out DIR] [--prompt N] [--steps N]
Each family keeps its real head dim and the variant fields its attention uses (windows
shorter than the prompt, so that they bite). Per model: prefill over a B2 prompt, then
--steps decode steps over the cache, teacher-forced on the float32 model's greedy tokens so
that every model sees the same inputs; the error of each bf16 path's logits against float32
(|x - ref| / |ref| over all positions), argmax agreement with float32, free-running greedy
tokens against the bf16 peer's and float32's (with random weights the top logits are close,
so bf16 rounding may flip a token), and the variant fields gllm was sent. A model passes when
gllm's errors are at most 1.5x the bf16 peer's (+1e-3) and gllm ran every attention call.
Writes DIR/hf_models.json (gllm-bench-run/1 metadata, a "models" table). Exit 1 on a
failure.
"""
import argparse
import datetime
import json
import os
import sys
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import benchrun  # noqa: E402
import gllm  # noqa: E402
import gllm.integrations.transformers as gllm_hf  # noqa: E402

import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, vocab_size=1024,
           max_position_embeddings=4096, tie_word_embeddings=False)


def families():
    """name -> (config, the bf16 peer's attn_implementation, what gllm must be sent)."""
    t = transformers
    return {
        "llama3": (lambda: t.LlamaConfig(hidden_size=1024, intermediate_size=2048,
                                         num_hidden_layers=2, num_attention_heads=16,
                                         num_key_value_heads=4, head_dim=64, **IDS),
                   "sdpa", set()),
        "mistral": (lambda: t.MistralConfig(hidden_size=1024, intermediate_size=2048,
                                            num_hidden_layers=2, num_attention_heads=8,
                                            num_key_value_heads=2, head_dim=128,
                                            sliding_window=128, **IDS),
                    "sdpa", {"sliding_window"}),
        "gemma2": (lambda: t.Gemma2Config(hidden_size=1024, intermediate_size=2048,
                                          num_hidden_layers=4, num_attention_heads=8,
                                          num_key_value_heads=4, head_dim=256,
                                          sliding_window=128, attn_logit_softcapping=50.0,
                                          final_logit_softcapping=30.0,
                                          query_pre_attn_scalar=256, **IDS),
                   "eager", {"sliding_window", "softcap"}),
        "gemma3": (lambda: t.Gemma3TextConfig(hidden_size=1024, intermediate_size=2048,
                                              num_hidden_layers=6, num_attention_heads=8,
                                              num_key_value_heads=4, head_dim=256,
                                              sliding_window=128, query_pre_attn_scalar=256,
                                              **IDS),
                   "sdpa", {"sliding_window"}),
        "phi3": (lambda: t.Phi3Config(hidden_size=768, intermediate_size=1536,
                                      num_hidden_layers=2, num_attention_heads=8,
                                      num_key_value_heads=8, sliding_window=128, **IDS),
                 "sdpa", {"sliding_window"}),
        "gpt_oss": (lambda: t.GptOssConfig(hidden_size=512, intermediate_size=512,
                                           num_hidden_layers=2, num_attention_heads=8,
                                           num_key_value_heads=2, head_dim=64,
                                           sliding_window=128, num_local_experts=4,
                                           num_experts_per_tok=2, **IDS),
                    "eager", {"sliding_window", "s_aux"}),
        "cohere2": (lambda: t.Cohere2Config(hidden_size=1024, intermediate_size=2048,
                                            num_hidden_layers=4, num_attention_heads=8,
                                            num_key_value_heads=2, sliding_window=128, **IDS),
                    "sdpa", {"sliding_window"}),
    }


class Seen:
    """Wraps the adapter: counts its calls and the variant fields it was given."""

    def __init__(self):
        self.calls, self.fields, self.head_dims, self.windows = 0, set(), set(), set()

    def __call__(self, module, query, key, value, attention_mask, **kw):
        self.calls += 1
        self.head_dims.add(int(query.shape[-1]))
        for f in ("sliding_window", "softcap", "s_aux"):
            if kw.get(f) is not None:
                self.fields.add(f)
        if kw.get("sliding_window"):
            self.windows.add(int(kw["sliding_window"]))
        return gllm_hf.attention_forward(module, query, key, value, attention_mask, **kw)


def build(cfg_fn, impl, dtype, state=None):
    cfg = cfg_fn()
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_config(cfg, attn_implementation=impl)
    if state is not None:
        m.load_state_dict(state)
    return m.to("cuda", dtype).eval()


@torch.no_grad()
def run(model, prompt, forced):
    """Prefill logits [B, S, V] and the logits of each decode step fed forced[:, i]."""
    out = model(input_ids=prompt, use_cache=True)
    pre, past, steps = out.logits.float(), out.past_key_values, []
    for i in range(forced.shape[1]):
        out = model(input_ids=forced[:, i:i + 1], past_key_values=past, use_cache=True)
        past = out.past_key_values
        steps.append(out.logits[:, -1].float())
    return pre, torch.stack(steps, 1)


@torch.no_grad()
def greedy(model, prompt, n):
    out = model(input_ids=prompt, use_cache=True)
    past, tok, toks = out.past_key_values, out.logits[:, -1:].argmax(-1), []
    for _ in range(n):
        toks.append(tok)
        out = model(input_ids=tok, past_key_values=past, use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    return torch.cat(toks, 1)


def rel(x, ref):
    return float((x - ref).norm() / ref.norm())


def agree(x, ref):
    return float((x.argmax(-1) == ref.argmax(-1)).float().mean())


def check_model(name, cfg_fn, peer_impl, want_fields, prompt_len, steps, seen):
    gen = torch.Generator().manual_seed(56)
    ref = build(cfg_fn, "eager", torch.float32)
    state = ref.state_dict()
    prompt = torch.randint(3, 1024, (2, prompt_len), generator=gen).cuda()
    forced = greedy(ref, prompt, steps)
    ref_pre, ref_dec = run(ref, prompt, forced)
    del ref
    peer = build(cfg_fn, peer_impl, torch.bfloat16, state)
    peer_pre, peer_dec = run(peer, prompt, forced)
    peer_tok = greedy(peer, prompt, steps)
    del peer
    mine = build(cfg_fn, gllm_hf.NAME, torch.bfloat16, state)
    calls0 = seen.calls
    my_pre, my_dec = run(mine, prompt, forced)
    my_tok = greedy(mine, prompt, steps)
    calls = seen.calls - calls0
    cfg = cfg_fn()
    layers = cfg.num_hidden_layers
    # every layer's attention, each forward: a prefill and steps decodes, twice (run, greedy)
    want_calls = layers * 2 * (1 + steps)
    def lead(a, b):      # tokens equal from the first on, in every sequence of the batch
        return int((a == b).all(0).long().cumprod(0).sum())
    r = {
        "model": name, "class": type(mine).__name__, "layers": layers,
        "heads": cfg.num_attention_heads, "kv_heads": cfg.num_key_value_heads,
        "head_dim": sorted(seen.head_dims), "peer": peer_impl,
        "windows_sent": sorted(seen.windows), "fields_sent": sorted(seen.fields),
        "gllm_calls": calls, "expected_calls": want_calls,
        "prefill_rel_err": {"gllm": rel(my_pre, ref_pre), "peer": rel(peer_pre, ref_pre)},
        "decode_rel_err": {"gllm": rel(my_dec, ref_dec), "peer": rel(peer_dec, ref_dec)},
        "prefill_argmax_agree": {"gllm": agree(my_pre, ref_pre), "peer": agree(peer_pre, ref_pre)},
        "decode_argmax_agree": {"gllm": agree(my_dec, ref_dec), "peer": agree(peer_dec, ref_dec)},
        "greedy_tokens_as_f32": {"gllm": lead(my_tok, forced), "peer": lead(peer_tok, forced)},
        "greedy_tokens_equal_to_peer": lead(my_tok, peer_tok), "greedy_tokens": steps,
    }
    del mine
    torch.cuda.empty_cache()
    ok = calls == want_calls and want_fields <= seen.fields
    for k in ("prefill_rel_err", "decode_rel_err"):
        ok &= r[k]["gllm"] <= 1.5 * r[k]["peer"] + 1e-3
    r["ok"] = bool(ok)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--models", default=None, help="comma-separated, of " + ", ".join(families()))
    ap.add_argument("--out", default=None)
    ap.add_argument("--prompt", type=int, default=300)
    ap.add_argument("--steps", type=int, default=16)
    args = ap.parse_args()
    fams = families()
    names = args.models.split(",") if args.models else list(fams)
    client = gllm.connect(args.socket)
    gllm_hf.register(client)
    results = []
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, gllmd "
          f"{client.caps.daemon_version} backend {client.caps.backend}", flush=True)
    for name in names:
        cfg_fn, peer, want = fams[name]
        seen = Seen()
        transformers.AttentionInterface.register(gllm_hf.NAME, seen)
        try:
            r = check_model(name, cfg_fn, peer, want, args.prompt, args.steps, seen)
        except Exception as e:   # one family's failure is reported, the others still run
            r = {"model": name, "ok": False, "error": f"{type(e).__name__}: {e}",
                 "traceback": traceback.format_exc(limit=6)}
            print(r["traceback"], flush=True)
        results.append(r)
        if "error" in r:
            print(f"FAIL {name}: {r['error']}", flush=True)
            continue
        print(f"{'ok  ' if r['ok'] else 'FAIL'} {name:8} {r['class']:22} D{r['head_dim']} "
              f"windows {r['windows_sent']} fields {r['fields_sent']} calls {r['gllm_calls']}/"
              f"{r['expected_calls']}; rel err vs f32 prefill {r['prefill_rel_err']['gllm']:.2e} "
              f"(peer {r['peer']} {r['prefill_rel_err']['peer']:.2e}), decode "
              f"{r['decode_rel_err']['gllm']:.2e} ({r['decode_rel_err']['peer']:.2e}); argmax "
              f"{r['prefill_argmax_agree']['gllm']:.3f}/{r['decode_argmax_agree']['gllm']:.3f} "
              f"(peer {r['prefill_argmax_agree']['peer']:.3f}/{r['decode_argmax_agree']['peer']:.3f}); "
              f"greedy: {r['greedy_tokens_equal_to_peer']}/{r['greedy_tokens']} tokens as the peer's, "
              f"{r['greedy_tokens_as_f32']['gllm']} as f32's (peer {r['greedy_tokens_as_f32']['peer']})",
              flush=True)
    passed = sum(r["ok"] for r in results)
    print(f"models: {passed} passed, {len(results) - passed} failed", flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "commit": benchrun.commit(), "gllmd_version": client.caps.daemon_version,
                "backend": client.caps.backend, "device": torch.cuda.get_device_name(0),
                "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
                "tool": "hf_models.py", "transformers": transformers.__version__,
                "peers": benchrun.torch_peers(torch)}
        meta.update(benchrun.nvidia_smi())
        with open(os.path.join(args.out, "hf_models.json"), "w") as f:
            json.dump({"schema": benchrun.SCHEMA, "meta": meta, "cases": [], "models": results}, f,
                      indent=1)
            f.write("\n")
    return 0 if results and passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
