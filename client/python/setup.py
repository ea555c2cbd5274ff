"""The build of the chubbycell package (see pyproject.toml): build_py also
generates the Thrift modules from the repository's idl/chubby.thrift (or
the file CHUBBY_IDL names) with the Apache Thrift compiler (`thrift` on
PATH, or CHUBBY_THRIFT) into the built package's chubbycell/_thrift, as
./build.sh python does for a checkout. The compiler's *-remote scripts are
left out. A build without the compiler or the IDL fails, naming them."""

import glob
import os
import shutil
import subprocess
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.errors import SetupError

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithThrift(build_py):
    """build_py, then `thrift --gen py` into <build_lib>/chubbycell/_thrift."""

    def run(self):
        super().run()
        idl = os.environ.get("CHUBBY_IDL") or os.path.join(HERE, "..", "..", "idl", "chubby.thrift")
        if not os.path.isfile(idl):
            raise SetupError("chubbycell: %s is missing: build from the repository's client/python "
                             "(or set CHUBBY_IDL to idl/chubby.thrift)" % idl)
        thrift = os.environ.get("CHUBBY_THRIFT") or shutil.which("thrift")
        if not thrift:
            raise SetupError("chubbycell: the Apache Thrift compiler is missing (apt-get install thrift-compiler)")
        pkg = os.path.join(self.build_lib, "chubbycell")
        out = os.path.join(pkg, "_thrift")
        tmp = tempfile.mkdtemp(prefix=".thrift-gen.", dir=pkg)
        try:
            subprocess.run([thrift, "--gen", "py", "-out", tmp, idl], check=True)
            for f in glob.glob(os.path.join(tmp, "chubby", "*-remote")):
                os.remove(f)
            shutil.rmtree(out, ignore_errors=True)
            os.rename(tmp, out)
        except (OSError, subprocess.CalledProcessError) as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise SetupError("chubbycell: generating the Thrift modules from %s: %s" % (idl, e)) from e


setup(cmdclass={"build_py": BuildWithThrift})
