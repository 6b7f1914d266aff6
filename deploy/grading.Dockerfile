# The grading image: Linux, bubblewrap and the kit, for an instructor whose machine has
# no bubblewrap (macOS, Windows). `make autograde-container` builds it and runs the
# grading commands in it with the course folder mounted at /course. Student code still
# runs in bubblewrap, one sandbox per submission, inside the container: the container
# gives the Linux that bubblewrap needs, the sandbox stays the one README describes.
FROM python:3.11-slim-bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /kit
COPY pyproject.toml README.md ./
COPY autodiff ./autodiff
COPY classroom ./classroom
RUN pip install --no-cache-dir ".[course]"
# Grading runs as this user: bubblewrap then makes user namespaces as a user does.
RUN useradd --create-home grader
USER grader
WORKDIR /course
ENTRYPOINT ["python", "-m", "classroom"]
