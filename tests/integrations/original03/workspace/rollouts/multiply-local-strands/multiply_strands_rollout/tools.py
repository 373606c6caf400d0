from strands import tool


@tool(name="multiply")
async def multiply_tool(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b
