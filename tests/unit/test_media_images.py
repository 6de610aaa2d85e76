"""Photos to model-ready JPEGs: sized, upright, opaque; bad or huge images refused."""

from __future__ import annotations

import base64
import io
import random

import pytest
from PIL import Image

from src.media.images import MAX_SIDE, ImageError, Picture, prepare_image
from tests.media_files import image_bytes


def decoded(picture: Picture) -> Image.Image:
    """Return the picture's JPEG opened, checking it is one of the size it claims."""
    image = Image.open(io.BytesIO(picture.jpeg))
    assert (image.format, image.mode) == ("JPEG", "RGB")
    assert image.size == (picture.width, picture.height)
    return image


def test_large_photo_is_scaled_to_the_long_side() -> None:
    picture = prepare_image(image_bytes(4000, 3000))
    assert (picture.width, picture.height) == (MAX_SIDE, 1176) == (1568, 1176)
    decoded(picture)


def test_small_photo_is_not_upscaled() -> None:
    picture = prepare_image(image_bytes(300, 200, "PNG"))
    assert (picture.width, picture.height) == (300, 200)
    red, green, blue = decoded(picture).getpixel((150, 100))
    assert abs(red - 200) < 8 and green < 40 and blue < 40


def test_max_side_is_the_callers() -> None:
    picture = prepare_image(image_bytes(300, 1200), max_side=600)
    assert (picture.width, picture.height) == (150, 600)


def test_exif_rotation_swaps_the_sides() -> None:
    # Orientation 6: the camera was turned; the stored 400x300 is shown 300x400.
    picture = prepare_image(image_bytes(400, 300, exif_orientation=6))
    assert (picture.width, picture.height) == (300, 400)


def test_transparency_is_laid_on_white() -> None:
    picture = prepare_image(image_bytes(64, 64, "PNG", color=(0, 0, 0, 0)))
    assert decoded(picture).getpixel((32, 32)) == (255, 255, 255)


def test_palette_transparency_is_laid_on_white() -> None:
    image = Image.new("P", (32, 32), 0)
    image.putpalette([0, 0, 0] * 256)
    out = io.BytesIO()
    image.save(out, "PNG", transparency=0)
    assert decoded(prepare_image(out.getvalue())).getpixel((16, 16)) == (255, 255, 255)


def test_animation_keeps_its_first_frame() -> None:
    frames = [Image.new("RGB", (40, 30), color) for color in ((0, 0, 255), (255, 255, 0))]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:])
    red, green, blue = decoded(prepare_image(out.getvalue())).getpixel((20, 15))
    assert blue > 200 and red < 40 and green < 40


def test_data_url_carries_the_jpeg() -> None:
    picture = prepare_image(image_bytes(10, 10))
    prefix, _, payload = picture.data_url().partition(",")
    assert prefix == "data:image/jpeg;base64"
    assert base64.b64decode(payload) == picture.jpeg


def test_corrupt_images_are_image_errors() -> None:
    good = image_bytes(60, 40, "PNG")
    with pytest.raises(ImageError):
        prepare_image(b"not an image at all")
    with pytest.raises(ImageError):
        prepare_image(image_bytes(600, 400)[:2000])
    rng = random.Random(17)
    for _ in range(300):
        damaged = bytearray(good)
        for _ in range(rng.randrange(1, 10)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        try:
            prepare_image(bytes(damaged))
        except ImageError:
            pass


def test_decompression_bomb_is_refused() -> None:
    # 60 megapixels of one bit each: a 7 MB canvas in a file of a few kilobytes.
    out = io.BytesIO()
    Image.new("1", (10_000, 6_000)).save(out, "PNG")
    assert len(out.getvalue()) < 100_000
    with pytest.raises(ImageError, match="10000x6000"):
        prepare_image(out.getvalue())
