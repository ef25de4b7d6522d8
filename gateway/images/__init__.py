"""Images in requests: fetching an ``http(s)`` image under the operator's rules (``fetch``) and
checking any image's bytes before they go anywhere (``check``). A leaf: imports no layer; planning
calls it (``plan/images.py``) and the backend contract sends what it returns."""
