"""What the npu backend (runtime/backends/npu.py) needs from a CANN install: finding the toolkit
(toolkit.py) and the custom-op package of each operator (packages.py), loading the libraries
with errors that say what to do (libraries.py), and the one ACL runtime of the process
(acl_runtime.py). Nothing here runs without a toolkit; the tests drive it through fake
libraries with the same C interface.
"""
