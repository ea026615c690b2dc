"""Ships the top-level targets/, boards/, runtime_c/ and templates/ inside the wheel as fluidml_xc/_data."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

DATA_DIRS = ("targets", "boards", "runtime_c", "templates")


class BuildWithData(build_py):
    def run(self):
        super().run()
        root = Path(__file__).parent
        dest = Path(self.build_lib) / "fluidml_xc" / "_data"
        for name in DATA_DIRS:
            shutil.copytree(root / name, dest / name, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildWithData})
