"""Writes tests/data/pyjson_floats.txt: Python's json.dumps() of 2000 doubles.

Run once (python3 tests/data/pyjson_floats.py > tests/data/pyjson_floats.txt) and
committed, so tests/unit/test_pyjson.c compares mqproc's serializer with Python
without needing Python. The seed is fixed: running it again gives the same file.
"""
import json
import math
import random
import struct
import sys

random.seed(20240601)
xs = []
while len(xs) < 2000:
    kind = len(xs) % 5
    if kind == 0:  # any bit pattern: every binary exponent, subnormals included
        x = struct.unpack("<d", struct.pack("<Q", random.getrandbits(64)))[0]
    elif kind == 1:  # 1 to 17 significant digits, decimal exponents -320..308
        nd, e = random.randint(1, 17), random.randint(-320, 308)
        x = float("%de%d" % (random.randint(10 ** (nd - 1), 10**nd - 1), e - nd + 1))
    elif kind == 2:  # around the switches to exponent form (1e-4, 1e16)
        x = random.random() * 10.0 ** random.randint(-7, 19)
    elif kind == 3:  # powers of two: the shortest digits are not always the nearest
        x = math.ldexp(1.0, random.randint(-1074, 1023))
    else:  # integral values
        x = float(random.getrandbits(random.randint(1, 70)))
    if math.isfinite(x):
        xs.append(random.choice([x, -x]))
version = "%d.%d.%d" % sys.version_info[:3]
print("# json.dumps(x) of Python %s: the bits of x in hex, a tab, the text." % version)
print("# Made by tests/data/pyjson_floats.py; read by tests/unit/test_pyjson.c.")
for x in xs:
    print("%016x\t%s" % (struct.unpack("<Q", struct.pack("<d", x))[0], json.dumps(x)))
