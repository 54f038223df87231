"""The example agent benchmark's DataModel: a task, the files it starts from, its tests."""

from pydantic import BaseModel, Field


class AgentTask(BaseModel):
    id: str
    task: str = Field(description="What the agent is asked to do, in its working folder.")
    files: dict[str, str] = Field(description="The working folder's files at the start: relative path -> text.")
    tests: dict[str, str] = Field(description="The grading files, written after the session into $TESTS_DIR.")
    test: str = Field(description="The bash command that passes (exit code 0) when the task is done.")
