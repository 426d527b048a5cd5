"""The audio tower of a multimodal checkpoint, as the engine loads it beside the language model
(:attr:`kvcalc.engine.spec.ModelSpec.audio`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConformerAudioEncoder:
    """Gemma 4's audio encoder (transformers Gemma4AudioModel, a USM-style conformer) and the
    projector into the text model (Gemma4MultimodalEmbedder ``embed_audio``).

    A stem of two 3x3 stride-2 convolutions (``channels``, bias-free, each with a bias-free
    LayerNorm) and a linear from ``(channels[0] // 4) x channels[1]`` features to ``hidden``;
    ``layers`` conformer blocks of two feed-forward modules (hidden -> 4 hidden -> hidden, two
    RMSNorms each), attention (q, k, v, post and the relative-position key projection, all
    hidden x hidden, and a per-dim scale of the head dim), a light convolution (linear_start
    to 2 hidden, a depthwise kernel of ``conv_kernel``, linear_end, two RMSNorms) and three
    RMSNorms; an output projection to ``output_dims`` with a bias, then ``output_dims`` ->
    ``text_hidden`` without one. vLLM builds the tower with transformers' AutoModel, so it is
    whole on every tensor-parallel rank."""

    layers: int
    hidden: int
    heads: int
    conv_kernel: int
    channels: tuple[int, int]
    output_dims: int
    text_hidden: int

    def params(self) -> int:
        h, (c0, c1) = self.hidden, self.channels
        stem = 9 * c0 + c0 + 9 * c0 * c1 + c1 + (c0 // 4) * c1 * h
        feed_forward = 2 * (8 * h * h + 2 * h)
        attention = 5 * h * h + h // self.heads
        light_conv = 3 * h * h + h * self.conv_kernel + 2 * h
        block = feed_forward + attention + light_conv + 3 * h
        head = h * self.output_dims + self.output_dims + self.output_dims * self.text_hidden
        return stem + self.layers * block + head
