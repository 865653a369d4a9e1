"""Print the image's requirements (the package's dependencies and the `postgres` extra), read
from pyproject.toml, so that the Dockerfile installs them in a layer that survives source edits."""
import sys
import tomllib

with open(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["postgres"]))
