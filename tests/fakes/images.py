"""Real little images for the fakes and their tests, made and read with Pillow.

The fake Bot API stores the sizes of a photo as real JPEGs and the fake OpenAI server
decodes every image part it is sent, so both need one way to make and read images.
"""

from __future__ import annotations

import io

from PIL import Image

# Pillow's format names for the kinds a data URL names (image/<kind>).
PIL_FORMATS = {"png": "PNG", "jpeg": "JPEG", "gif": "GIF", "webp": "WEBP"}


def make_image(
    width: int = 64,
    height: int = 48,
    kind: str = "jpeg",
    color: tuple[int, int, int] = (200, 80, 40),
) -> bytes:
    """Return a one-colour image of `kind` (png, jpeg, gif or webp) as file bytes."""
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, PIL_FORMATS[kind])
    return out.getvalue()


def image_info(data: bytes) -> tuple[str, int, int] | None:
    """Return (kind, width, height) of a whole, readable image, or None.

    The pixels are decoded, not just the header, so a truncated file is not an image.
    """
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            kind = str(image.format).lower()
            return kind, image.width, image.height
    except (OSError, ValueError, Image.DecompressionBombError):
        return None


def downscale_jpeg(data: bytes, longest: int) -> tuple[bytes, int, int]:
    """Return a JPEG of the image shrunk to `longest` pixels on its long side, and its size."""
    with Image.open(io.BytesIO(data)) as image:
        small = image.convert("RGB")
    small.thumbnail((longest, longest))
    out = io.BytesIO()
    small.save(out, "JPEG")
    return out.getvalue(), small.width, small.height
