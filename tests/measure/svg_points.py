"""Parses an SVG with an XML parser (well-formedness) and prints its plotted
points as JSON: [{"series", "procs", "value", "cx", "cy"}]."""
import json
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
assert root.tag == ns + "svg", root.tag
points = []
for c in root.iter(ns + "circle"):
    if c.get("class") == "point":
        points.append({"series": c.get("data-series"), "procs": int(c.get("data-procs")),
                       "value": float(c.get("data-value")), "cx": float(c.get("cx")),
                       "cy": float(c.get("cy"))})
print(json.dumps({"points": points,
                  "ideal_lines": sum(1 for p in root.iter(ns + "polyline") if p.get("class") == "ideal"),
                  "labels": [t.text for t in root.iter(ns + "text") if t.get("class") == "efficiency"]}))
