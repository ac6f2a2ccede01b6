"""How one GPU's memory is best divided between the memories that trade against each other (``mmpool tune``).

Neutral: knows no engine; imports ``core`` only. ``split`` holds the types and the candidate grid,
``front`` the Pareto front and the objectives.
"""
