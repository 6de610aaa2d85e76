"""How OpenAI's chat completions check images, for the fake server.

The shape of content parts is checked with the rest of the message protocol in
`tests.fakes.openai_server`; `read_images` then checks the model and decodes every image,
so the fake can record what a vision model was shown.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from tests.fakes.images import image_info

IMAGE_KINDS = ("png", "jpeg", "gif", "webp")
_DATA_URL = re.compile(r"data:([^;,]*)(;base64)?,(.*)", re.DOTALL)
NOT_VISION = "Invalid content type. image_url is only supported by certain models."
BAD_BASE64 = "Invalid base64 image_url."
INVALID_IMAGE = "You uploaded an unsupported image. Please make sure your image is valid."
UNSUPPORTED_KIND = (
    "You uploaded an unsupported image. Please make sure your image has of one the following "
    "formats: ['png', 'jpeg', 'gif', 'webp']."
)

# (message, param, code) of a 400 answer
Rejection = tuple[str, str | None, str | None]


def read_images(
    body: dict[str, Any], vision_models: set[str]
) -> tuple[list[dict[str, Any]], Rejection | None]:
    """Return what each image part of a well-formed request shows, or why OpenAI refuses it.

    Each image is a dict: model, url (http images are not fetched: mime and size None) or
    mime_type, width, height and size in bytes, decoded with Pillow.
    """
    model = body.get("model")
    seen = []
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        for j, part in enumerate(content if isinstance(content, list) else []):
            if part.get("type") != "image_url":
                continue
            if model not in vision_models:
                return [], (NOT_VISION, f"messages.[{i}].content.[{j}].type", None)
            image = _image(part["image_url"]["url"], f"messages[{i}].content[{j}].image_url.url")
            if isinstance(image, tuple):
                return [], image
            seen.append({"model": model} | image)
    return seen, None


def _image(url: str, where: str) -> dict[str, Any] | Rejection:
    """Return what one image URL shows, or the rejection of a bad one."""
    if url.startswith(("http://", "https://")):
        return {"url": url, "mime_type": None, "width": None, "height": None, "size": None}
    match = _DATA_URL.fullmatch(url)
    if match is None:
        return (
            (
                f"Invalid image URL: '{where}'. Expected a base64-encoded data URL with an image "
                "MIME type (e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got a value "
                "without the 'data:' prefix."
            ),
            where,
            "invalid_value",
        )
    mime, is_base64, payload = match.groups()
    kind = mime.removeprefix("image/") if mime.startswith("image/") else ""
    if kind not in IMAGE_KINDS:
        return UNSUPPORTED_KIND, None, "invalid_image_format"
    try:
        data = base64.b64decode(payload, validate=True) if is_base64 else b""
    except (binascii.Error, ValueError):
        data = b""
    if not data:
        return BAD_BASE64, None, "invalid_base64"
    info = image_info(data)
    if info is None or info[0] != kind:
        return INVALID_IMAGE, None, "image_parse_error"
    _, width, height = info
    return {"url": None, "mime_type": mime, "width": width, "height": height, "size": len(data)}
