#!/usr/bin/python3
"""Makes a small real image set for MAE pretraining, offline: the colour photos Debian's
scikit-image package ships (astronaut, chelsea the cat, coffee, the Hubble deep field, ...), cut
into square crops and written as JPEGs in an ImageFolder tree (OUT/<photo>/<n>.jpg), one class per
photo. The photos come from the installed package when it is there, else from its .deb, which
scripts/setup keeps in ~/.cache/cpc (CPC_CACHE) without installing it.

Example:  /usr/bin/python3 examples/mae/make_image_set.py --out /tmp/photos
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

from PIL import Image

DATA_DIR = "usr/lib/python3/dist-packages/skimage/data"
# The colour photographs among scikit-image's samples (the rest are grey, binary or synthetic).
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "hubble_deep_field.jpg", "ihc.png",
          "motorcycle_left.png", "motorcycle_right.png", "retina.jpg", "rocket.jpg", "color.png"]


def find_photos(tmp):
    """The directory holding scikit-image's sample photos."""
    installed = "/" + DATA_DIR
    if all(os.path.exists(os.path.join(installed, p)) for p in PHOTOS):
        return installed
    cache = os.environ.get("CPC_CACHE", os.path.expanduser("~/.cache/cpc"))
    debs = sorted(glob.glob(os.path.join(cache, "python3-skimage_*.deb")))
    if not debs:
        sys.exit(f"make_image_set: no python3-skimage .deb in {cache}: run scripts/setup --deps "
                 f"(or `cd {cache} && apt-get download python3-skimage`)")
    subprocess.run(["dpkg-deb", "-x", debs[-1], tmp], check=True)
    return os.path.join(tmp, DATA_DIR)


def crops(image, side, per_row):
    """`per_row` x `per_row` squares of `side` pixels spread evenly over the image (overlapping
    where it is small), after scaling its short side to at least `side`."""
    scale = max(1.0, side / min(image.size))
    if scale > 1:
        image = image.resize((round(image.width * scale), round(image.height * scale)), Image.BICUBIC)
    for row in range(per_row):
        for col in range(per_row):
            x = (image.width - side) * col // max(per_row - 1, 1)
            y = (image.height - side) * row // max(per_row - 1, 1)
            yield image.crop((x, y, x + side, y + side))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="ImageFolder root to write")
    ap.add_argument("--side", type=int, default=128, help="crop side in pixels (default 128)")
    ap.add_argument("--per-row", type=int, default=4, help="crops per row and column of each photo (default 4)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = find_photos(tmp)
        count = 0
        for photo in PHOTOS:
            name = os.path.splitext(photo)[0]
            os.makedirs(os.path.join(args.out, name), exist_ok=True)
            with Image.open(os.path.join(source, photo)) as image:
                rgb = image.convert("RGB")
            for n, crop in enumerate(crops(rgb, args.side, args.per_row)):
                crop.save(os.path.join(args.out, name, f"{n:02d}.jpg"), quality=90)
                count += 1
    print(f"wrote {count} crops of {args.side}x{args.side} from {len(PHOTOS)} photos "
          f"(scikit-image's samples) into {args.out}")


if __name__ == "__main__":
    main()
