"""Renders an SVG in headless Chromium (a real browser) and checks that every
plotted point is drawn where the SVG says: the PNG's pixel at each point's
centre has the points' colour. Prints JSON {"points", "wrong": [...]}.

usage: svg_render_check.py SVG CHROMIUM PNG"""
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

from PIL import Image

svg, chromium, png = sys.argv[1:4]
root = ET.parse(svg).getroot()
ns = "{http://www.w3.org/2000/svg}"
width, height = int(float(root.get("width"))), int(float(root.get("height")))
subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                "--force-device-scale-factor=1", f"--window-size={width},{height}",
                f"--screenshot={png}", "file://" + svg],
               check=True, timeout=90, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
image = Image.open(png).convert("RGB")
assert image.size == (width, height), image.size


def colour(hex_colour):
    return tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))


points, wrong = 0, []
for c in root.iter(ns + "circle"):
    if c.get("class") != "point":
        continue
    points += 1
    x, y = round(float(c.get("cx"))), round(float(c.get("cy")))
    want, got = colour(c.get("fill")), image.getpixel((x, y))
    if max(abs(a - b) for a, b in zip(want, got)) > 40:
        wrong.append({"x": x, "y": y, "want": want, "got": got})
# The page is not blank: the background is white, the axes and lines are not.
non_white = sum(1 for p in image.getdata() if p != (255, 255, 255))
print(json.dumps({"points": points, "wrong": wrong, "non_white": non_white}))
