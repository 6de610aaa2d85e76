"""Turn the bytes of a photo a user sent into a JPEG a vision model takes.

Synchronous CPU work on untrusted bytes: the caller runs it in a thread. Whatever is wrong
with the image comes out as an `ImageError`.
"""

from __future__ import annotations

import base64
import io
import mimetypes
import struct
import zlib
from dataclasses import dataclass

from PIL import Image, ImageOps

# Vision models scale larger images down to about this long side anyway (Anthropic's
# guidance is 1,568 px); sending more only costs upload time and tokens.
MAX_SIDE = 1568

# Refuse to decode more pixels than this: a small file can declare a huge canvas (a
# decompression bomb). Below Pillow's own limit, so Pillow never warns first.
MAX_PIXELS = 50_000_000

JPEG_QUALITY = 85

# Images a user sends as files (uncompressed screenshots) that Pillow decodes: read like
# photos. Others (SVG, HEIC without a plugin) stay unsupported documents.
IMAGE_TYPES = ("image/jpeg", "image/png", "image/webp", "image/gif", "image/bmp", "image/tiff")

# What Pillow raises on data it cannot decode: UnidentifiedImageError and "image file is
# truncated" are OSErrors; some decoders raise the others on malformed headers.
IMAGE_FAILURES = (
    OSError,
    ValueError,
    SyntaxError,
    EOFError,
    IndexError,
    KeyError,
    TypeError,
    struct.error,
    zlib.error,
    Image.DecompressionBombError,
)


@dataclass(frozen=True)
class Picture:
    """A photo ready for the model: a JPEG and its size in pixels."""

    jpeg: bytes
    width: int
    height: int

    def data_url(self) -> str:
        """Return the JPEG as a data URL, the form an OpenAI-style image part carries."""
        return "data:image/jpeg;base64," + base64.b64encode(self.jpeg).decode("ascii")


class ImageError(Exception):
    """An image that cannot be decoded, or one too large to decode safely."""


def is_image(mime_type: str | None, file_name: str = "") -> bool:
    """Tell whether a file (by its MIME type, else its name) is an image `prepare_image` reads."""
    kind = (mime_type or "").lower() or (mimetypes.guess_type(file_name)[0] or "")
    return kind in IMAGE_TYPES


def prepare_image(data: bytes, max_side: int = MAX_SIDE) -> Picture:
    """Return the image upright, in RGB, its long side at most `max_side`, as a JPEG.

    Only the first frame of an animated image is kept.
    """
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.width * image.height > MAX_PIXELS:
                raise ImageError(f"{image.width}x{image.height} is more than {MAX_PIXELS} pixels")
            rgb = _flatten(ImageOps.exif_transpose(image))
        rgb.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
        out = io.BytesIO()
        rgb.save(out, "JPEG", quality=JPEG_QUALITY)
    except IMAGE_FAILURES as exc:
        raise ImageError(str(exc) or type(exc).__name__) from exc
    return Picture(out.getvalue(), rgb.width, rgb.height)


def _flatten(image: Image.Image) -> Image.Image:
    """Return the image in RGB, transparent parts laid on white (JPEG has no alpha)."""
    if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
        rgba = image.convert("RGBA")
        white = Image.new("RGB", rgba.size, (255, 255, 255))
        white.paste(rgba, mask=rgba.getchannel("A"))
        return white
    return image.convert("RGB")
