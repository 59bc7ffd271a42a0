"""What the tests read from docs' Markdown."""
import re

PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)  # a fenced python block's text
YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```$", re.DOTALL | re.MULTILINE)  # a fenced yaml block's text
