"""The model options of ``tidgap profile`` and ``tidgap run`` (and a job file's
``model_options``): each option's name and the models it applies to. Imports no PyTorch."""

from __future__ import annotations

#: Model options (keyword names), and the models they apply to.
MODEL_OPTIONS = {
    "layers": ("gpt",),
    "hidden": ("gpt",),
    "heads": ("gpt",),
    "seq_len": ("gpt",),
    "vocab": ("gpt", "module:attribute"),
    "image_size": ("vgg16",),
    "classes": ("vgg16",),
    "input_shape": ("module:attribute",),
}
#: The one option that is text (a sample's shape, ``3,32,32``); the others are counts.
SHAPE_OPTION = "input_shape"
